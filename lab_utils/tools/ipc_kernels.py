"""Notebook kernels on Unix sockets, not TCP ports, for the test runs (papermill and nbval).

jupyter_client picks a kernel's five TCP ports by binding port 0 and closing it; the kernel binds
them a moment later. On a machine where other processes take ephemeral ports all the time (here:
torchrun rendezvous and gloo listeners of the parallel test workers), one of them can take such a
port in between, and the kernel dies at start ("Address already in use"; seen once in a clean-clone
`make test`). With the ipc transport the sockets are files next to the kernel's connection file:
no port to lose. Used by ``nbtools.execute`` (papermill) and, as a pytest plugin
(``-p lab_utils.tools.ipc_kernels``), by the nbval runs (tests/nbval_quick.py).
"""

from __future__ import annotations

import os
import tempfile
import uuid

from jupyter_client.manager import AsyncKernelManager, KernelManager
from traitlets import CaselessStrEnum, HasTraits, Unicode, default


def _ipc_path() -> str:
    # jupyter_client's default may be the RELATIVE "kernel-ipc": wrong when the kernel runs in
    # another folder than this process (nbval starts it in the notebook's folder)
    return os.path.join(tempfile.gettempdir(), f"kernel-{uuid.uuid4().hex[:12]}-ipc")


class _IPCTransport(HasTraits):
    """The two traits both managers change (a HasTraits mixin, so traitlets registers them)."""

    transport = CaselessStrEnum(["tcp", "ipc"], default_value="ipc", config=True)
    ip = Unicode(config=True)

    @default("ip")
    def _ip_ipc(self) -> str:
        return _ipc_path()


class IPCKernelManager(_IPCTransport, KernelManager):
    pass


class AsyncIPCKernelManager(_IPCTransport, AsyncKernelManager):
    pass


def pytest_configure(config) -> None:
    """nbval builds its kernel manager from the name it imported (nbval.kernel.KernelManager)."""
    import nbval.kernel

    nbval.kernel.KernelManager = IPCKernelManager
