"""The kernel's count of the bytes a process wrote to its TCP sockets (used by ``wire.WireMeter``).

How it measures, and why this way:
  * The kernel counts bytes per TCP socket. For each socket among this process's open files
    (``/proc/self/fd``; fstat gives a socket's inode) we read ``getsockopt(TCP_INFO)`` on a
    DUPLICATE of the fd (``os.dup``; closing our copy never closes gloo's) and take
    bytes_sent - bytes_retrans + notsent_bytes: every byte the application wrote,
    retransmissions not counted twice (a loaded machine does retransmit on loopback), bytes
    still queued counted. Linux >= 4.19. Enter and exit each take one such snapshot; the
    difference per socket is what the block sent.
  * Not ``/proc/self/io`` wchar (the fallback, method "wchar"): it counts every write, files
    and pipes included, and cannot say to whom. Not netlink INET_DIAG (what ``ss -ti`` uses):
    the same counters, but it lists every socket on the host and needs a netlink parser.
  * Which sockets are links to other ranks: not the store's (its port: control, reported as
    ``control``), not sockets whose other end is also in this process, not sockets the parent
    process holds too (a launcher's own connections, inherited by forked ranks).
  * To whom: at enter every rank writes its sockets' (local, remote) endpoints to the job's
    store (one store write, only when they changed). Reading ``sent_to`` matches each socket's
    remote endpoint with a peer's local one; addresses and ports, so it holds across nodes
    (where no NAT rewrites them).
    Reading it waits (``resolve_timeout_s``) for the peers it needs to have entered a
    WireMeter once; bytes it cannot attribute stay in ``unattributed``.
"""

from __future__ import annotations

import os
import socket
import stat
import struct
import sys

Endpoint = tuple[str, int]
Link = tuple[Endpoint, Endpoint]  # (local, remote) of one connected TCP socket


def _endpoint(addr: tuple) -> Endpoint:
    host = addr[0][7:] if addr[0].startswith("::ffff:") else addr[0]  # IPv4 seen through IPv6
    return host, int(addr[1])


def _written(info: bytes) -> int | None:
    """Bytes the application wrote to a socket, from struct tcp_info (linux/tcp.h)."""
    if len(info) < 216:  # tcpi_bytes_sent / tcpi_bytes_retrans need Linux >= 4.19
        return None
    (notsent,) = struct.unpack_from("=I", info, 144)  # tcpi_notsent_bytes
    sent, retrans = struct.unpack_from("=QQ", info, 200)  # tcpi_bytes_sent, _retrans
    return sent - retrans + notsent


def socket_inodes(pid: str = "self") -> set[int]:
    out = set()
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return out
    for fd in fds:
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:  # closed meanwhile
            continue
        if link.startswith("socket:["):
            out.add(int(link[8:-1]))
    return out


def tcp_snapshot() -> dict[int, tuple[Link, int]] | None:
    """{socket inode: ((local, remote), bytes written)} for this process's connected TCP
    sockets; None where the kernel's per-socket counters cannot be read (not Linux)."""
    if not sys.platform.startswith("linux") or not hasattr(socket, "TCP_INFO"):
        return None
    out: dict[int, tuple[Link, int]] = {}
    for fd in os.listdir("/proc/self/fd"):
        try:
            st = os.fstat(int(fd))  # faster than readlink; a socket's st_ino is its inode
            if not stat.S_ISSOCK(st.st_mode) or st.st_ino in out:
                continue
            inode, dup = st.st_ino, os.dup(int(fd))
        except OSError:  # closed meanwhile (listdir's own fd, for one)
            continue
        try:
            if os.fstat(dup).st_ino != inode:  # the fd number was reused meanwhile
                os.close(dup)
                continue
            with socket.socket(fileno=dup) as s:  # closes only our duplicate
                if (
                    s.family not in (socket.AF_INET, socket.AF_INET6)
                    or s.type != socket.SOCK_STREAM
                ):
                    continue
                try:
                    ends = (_endpoint(s.getsockname()), _endpoint(s.getpeername()))
                except OSError:  # a listening socket: no peer, no bytes
                    continue
                written = _written(s.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 232))
                if written is None:
                    return None
                out[inode] = (ends, written)
        except OSError:
            continue
    return out


def wchar() -> int | None:
    try:
        with open("/proc/self/io") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("wchar:"))
    except (OSError, StopIteration):
        return None
