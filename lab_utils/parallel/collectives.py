"""Collectives from send/recv: the ring all-reduce and the parameter server it replaced (lab 03).

Notation: N ranks in the group, D bytes in the tensor, chunk = D/N. Rank r sends to its right
neighbour (r+1) % N and receives from its left neighbour (r-1) % N, so every link of the ring
carries one chunk per step in each step, all links at once.

    ring_reduce_scatter  N-1 steps; rank r ends holding the full sum of chunk r;
                         sends (N-1)/N * D bytes per rank
    ring_all_gather      N-1 steps; every rank ends with every chunk;  (N-1)/N * D per rank
    ring_all_reduce      both: 2(N-1) steps, 2(N-1)/N * D bytes per rank (Patarasuk & Yuan
                         2009): the bandwidth term does not grow with N, the latency term
                         (2(N-1) messages in sequence) grows LINEARLY with N.
    parameter_server_all_reduce  every worker sends D to rank 0, which sums and sends D back:
                         rank 0 sends (N-1) * D, a bottleneck that grows with N.
    hierarchical_all_reduce  M nodes of G ranks: ring reduce-scatter inside the node, ring
                         all-reduce of the 1/G chunk across nodes (the ranks with the same local
                         index), ring all-gather inside the node. Per rank 2(G-1)/G * D on the
                         fast intra-node link and only 2(M-1)/M * D/G on the network, where a flat
                         ring spanning nodes pushes 2(N-1)/N * D over its slowest (network) hop.

Each step posts the send and the receive together (isend + irecv, then wait for both): with
blocking send/recv every rank would wait in send for a neighbour that is itself sending.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
import torch.distributed as dist


def ring_neighbours(group: Any) -> tuple[int, int, int, int]:
    """(n, rank in group, global rank of right neighbour, global rank of left neighbour)."""
    n, r = dist.get_world_size(group), dist.get_rank(group)
    right = dist.get_global_rank(group, (r + 1) % n) if group is not None else (r + 1) % n
    left = dist.get_global_rank(group, (r - 1) % n) if group is not None else (r - 1) % n
    return n, r, right, left


def exchange(send: torch.Tensor, recv: torch.Tensor, right: int, left: int, group: Any) -> None:
    """Send ``send`` right while receiving ``recv`` from the left; wait for both."""
    reqs = [dist.isend(send, right, group=group), dist.irecv(recv, left, group=group)]
    for req in reqs:
        req.wait()


def ring_chunks(tensor: torch.Tensor, n: int) -> list[torch.Tensor]:
    """The n chunks a ring collective passes around: views of ``tensor``, in place."""
    if not tensor.is_contiguous():
        raise ValueError("ring collectives work in place on a contiguous tensor")
    return list(tensor.view(-1).tensor_split(n))  # views; sizes differ by at most 1 element


def ring_reduce_scatter(tensor: torch.Tensor, group: Any = None) -> torch.Tensor:
    """Sum chunk r of ``tensor`` over the ring into rank r's copy; return that chunk (a view).

    N-1 steps; at step s rank r sends chunk (r-s-1) % N (its running partial sum) right and
    receives chunk (r-s-2) % N from the left, adding it to its own values. Other chunks are
    left holding partial sums. Bytes sent per rank: (N-1) chunks = (N-1)/N * D.
    """
    n, r, right, left = ring_neighbours(group)
    chunks = ring_chunks(tensor, n)
    if n == 1:
        return chunks[0]
    scratch = torch.empty_like(chunks[0])  # chunk 0 is the largest
    for s in range(n - 1):
        send_i, recv_i = (r - s - 1) % n, (r - s - 2) % n
        incoming = scratch[: chunks[recv_i].numel()]
        exchange(chunks[send_i], incoming, right, left, group)
        chunks[recv_i].add_(incoming)  # after step N-2 this is chunk r: the full sum
    return chunks[r]


def ring_all_gather(tensor: torch.Tensor, group: Any = None) -> torch.Tensor:
    """Given the finished chunk r on each rank r, fill every chunk of ``tensor`` in place.

    N-1 steps; at step s rank r forwards chunk (r-s) % N right and receives chunk
    (r-s-1) % N straight into place. Bytes sent per rank: (N-1)/N * D.
    """
    n, r, right, left = ring_neighbours(group)
    chunks = ring_chunks(tensor, n)
    for s in range(n - 1):
        send_i, recv_i = (r - s) % n, (r - s - 1) % n
        exchange(chunks[send_i], chunks[recv_i], right, left, group)
    return tensor


def ring_all_reduce(tensor: torch.Tensor, group: Any = None) -> torch.Tensor:
    """Sum ``tensor`` over all ranks of ``group``, in place, with only isend/irecv.

    Reduce-scatter phase (N-1 steps) then all-gather phase (N-1 steps), one chunk of D/N per
    step: 2(N-1) messages and 2(N-1)/N * D bytes sent per rank, the same as gloo's / NCCL's
    ring. Returns ``tensor``.
    """
    ring_reduce_scatter(tensor, group)  # rank r now holds the full sum of chunk r
    return ring_all_gather(tensor, group)  # pass the finished chunks around the ring


def parameter_server_all_reduce(
    tensor: torch.Tensor, group: Any = None, server: int = 0
) -> torch.Tensor:
    """The pre-ring design: workers send D to a server rank, which sums and sends D back.

    Server: receives (N-1) * D and sends (N-1) * D; each worker sends and receives D. The
    server's link carries N-1 times what a ring link does, so time grows with N. In place.
    """
    n, r = dist.get_world_size(group), dist.get_rank(group)
    server_g = dist.get_global_rank(group, server) if group is not None else server
    if r != server:
        dist.send(tensor, server_g, group=group)
        dist.recv(tensor, server_g, group=group)
        return tensor
    incoming = torch.empty_like(tensor)
    for worker in range(n):
        if worker != server:
            src = dist.get_global_rank(group, worker) if group is not None else worker
            dist.recv(incoming, src, group=group)
            tensor.add_(incoming)
    reqs = [
        dist.isend(tensor, dist.get_global_rank(group, w) if group is not None else w, group=group)
        for w in range(n)
        if w != server
    ]
    for req in reqs:
        req.wait()
    return tensor


def node_groups(gpus_per_node: int) -> tuple[Any, Any]:
    """(intra-node group, inter-node group) of this rank over the default group, ranks
    numbered node-major (rank = node * G + local). Collective: every rank creates every group,
    in the same order. A node holds G ranks; the inter-node group joins equal local indices."""
    n, r = dist.get_world_size(), dist.get_rank()
    if gpus_per_node < 1 or n % gpus_per_node:
        raise ValueError(f"gpus_per_node={gpus_per_node} must divide the world size {n}")
    nodes = n // gpus_per_node
    intra = [
        dist.new_group(list(range(m * gpus_per_node, (m + 1) * gpus_per_node)))
        for m in range(nodes)
    ]
    inter = [dist.new_group(list(range(i, n, gpus_per_node))) for i in range(gpus_per_node)]
    return intra[r // gpus_per_node], inter[r % gpus_per_node]


def hierarchical_all_reduce(tensor: torch.Tensor, intra: Any, inter: Any) -> torch.Tensor:
    """Sum ``tensor`` over every rank in place, in three phases (groups from ``node_groups``):
    reduce-scatter inside the node (rank with local index i ends with the node's sum of chunk
    i), all-reduce of that chunk across nodes, all-gather inside the node. Only isend/irecv."""
    chunk = ring_reduce_scatter(tensor, intra)  # a view into tensor: the node's sum of chunk i
    ring_all_reduce(chunk, inter)  # the same chunk index on every node: the global sum
    return ring_all_gather(tensor, intra)


def all_reduce_flat(tensors: list[torch.Tensor], op: Any, group: Any = None) -> None:
    """All-reduce many tensors with ONE collective, in place: concatenate them into one flat
    buffer, all-reduce it, copy each slice back (a DDP bucket's trick: one latency, not many)."""
    flat = torch.cat([t.reshape(-1) for t in tensors])
    dist.all_reduce(flat, op=op, group=group)
    for t, reduced in zip(tensors, flat.split([t.numel() for t in tensors])):
        t.copy_(reduced.view_as(t))


IMPLEMENTATIONS: dict[str, Callable] = {
    "gloo": lambda t, g=None: dist.all_reduce(t, group=g),
    "ring": ring_all_reduce,
    "parameter_server": parameter_server_all_reduce,
}
