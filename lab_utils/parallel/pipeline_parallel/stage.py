"""One pipeline stage on one rank: its forward, its backward (whole, or split in B and W), its p2p.

The model is cut into n_stages consecutive stages (``models.split_stages``: stage 0 also holds
the embeddings, the last stage ln_f + head + loss). A StageWorker runs ONE of them on this
rank; with interleaving a rank holds several (one StageWorker per model chunk). A global batch
of B rows is cut into m micro-batches of b = B/m rows.

Communication: point-to-point with the NEIGHBOUR stages only, no collective. Per micro-batch:
    forward : stage k --isend--> stage k+1   activation      (b, T, C) fp32 = 4 b T C bytes
    backward: stage k <--isend-- stage k+1   d loss / d act  (b, T, C) fp32 = 4 b T C bytes
so each stage boundary carries 2 m 4bTC bytes per step, whatever the schedule. The neighbours'
GLOBAL ranks come from ``pipeline_neighbours`` (Topology's pp axis: picotron's
pp_prev_rank / pp_next_rank), so the same worker runs inside a 3D mesh. Sends are isend
(waited in ``finish``), receives block: a stage can send and then receive from the same
neighbour without both waiting on each other. Messages of one boundary and direction share a
tag, so a receiver takes them in the order the sender sent them: two neighbours that disagree
on the order of micro-batches swap activations SILENTLY (wrong gradients, no error), as NCCL
would. With ``deadlock_after_s`` set, a receive that waits longer raises PipelineStuck naming
the op and the neighbour: a wrong order deadlocks, and the message says where.

The backward, whole or split (zero-bubble schedules, Qi et al. 2023):
    backward(i)         = B then W at once (GPipe, 1F1B, interleaved 1F1B)
    backward_input(i)   B: d loss / d input, sent to the previous stage at once (it waits for it)
    backward_weight(i)  W: d loss / d weights, accumulated into .grad; nobody waits for it.
W runs autograd again from the stage's output to its weights, so its real compute also redoes
the activation-gradient chain inside the stage (torch.distributed.pipelining's
stage_backward_weight keeps those intermediate gradients to avoid it); the values are exact.

Measurement stays outside: ``observer`` (set from outside, e.g. by lab_utils.experiments.lab07)
is a context-manager factory ``observer(op, mb, worker)`` entered around the COMPUTE of every
op ("F", "BW" whole backward, "B", "W"), never around a wait for a message.
"""

from __future__ import annotations

import threading
from contextlib import nullcontext
from typing import Any, Callable, ContextManager, Sequence

import torch
import torch.distributed as dist

from lab_utils.models import lm_loss
from lab_utils.topology import Topology

FWD, BWD = 0, 1  # message directions; tag = base + 2 * boundary + direction


class PipelineStuck(RuntimeError):
    """A stage waited ``deadlock_after_s`` for a neighbour's message: the order deadlocked."""


def stage_position(stage: int, p: int, placement: str = "loop") -> int:
    """Which pp position (0..p-1) holds pipeline stage ``stage`` of p * v.
    "loop": stage k on position k % p (interleaving: rank r holds r, r+p, ...);
    "V": stage k < p on k, stage k >= p on 2p-1-k (rank r holds r and 2p-1-r; ZB-V)."""
    if placement == "V":
        return stage if stage < p else 2 * p - 1 - stage
    return stage % p


def pipeline_neighbours(
    topo: Topology,
    rank: int,
    stage: int | None = None,
    n_stages: int | None = None,
    placement: str = "loop",
) -> tuple[int | None, int | None]:
    """Global ranks holding the stage before and after ``stage`` (None at the ends).

    ``stage`` defaults to this rank's pp coordinate, ``n_stages`` to topo.pp (one stage per
    rank); with v chunks per rank pass stage = c * p + r and n_stages = p * v. The ranks come
    from Topology's pp axis, so in a dp x tp x pp mesh the neighbour of global rank 5 is the
    rank with the same dp and tp coordinates one pp step away, not rank 4 or 6."""
    ranks = topo.axis_ranks("pp", rank)
    p = len(ranks)
    k = topo.coords(rank)["pp"] if stage is None else stage
    n = p if n_stages is None else n_stages
    prev = ranks[stage_position(k - 1, p, placement)] if k > 0 else None
    nxt = ranks[stage_position(k + 1, p, placement)] if k < n - 1 else None
    return prev, nxt


class StageWorker:
    """Pipeline stage ``stage`` of ``n_stages`` on this rank: F / B / W of micro-batch i + p2p.

    Keeps each micro-batch's input and output from its forward until its last backward op
    (``stored``: its activations stay alive in autograd's graph until then).
    """

    def __init__(
        self,
        module: torch.nn.Module,
        stage: int,
        n_stages: int,
        prev_rank: int | None,
        next_rank: int | None,
        inputs: Sequence[torch.Tensor],
        targets: Sequence[torch.Tensor],
        act_shape: tuple[int, ...],
        tag: int = 0,
        deadlock_after_s: float | None = None,
    ) -> None:
        self.module, self.stage, self.n_stages = module, stage, n_stages
        self.first, self.last = stage == 0, stage == n_stages - 1
        if (prev_rank is None) != self.first or (next_rank is None) != self.last:
            raise ValueError(
                f"stage {stage} of {n_stages}: prev_rank={prev_rank}, "
                f"next_rank={next_rank}; only the first stage has no previous "
                "and only the last no next"
            )
        self.prev_rank, self.next_rank = prev_rank, next_rank
        self.inputs, self.targets, self.m = inputs, targets, len(inputs)
        self.act_shape = act_shape  # (b, T, C): what crosses every stage boundary
        self.tag = tag  # a fresh base per step: a message left over by a deadlocked step is
        #                 never taken for one of the next step's (gloo matches by peer and tag)
        self.deadlock_after_s = deadlock_after_s
        self.params = [q for q in module.parameters() if q.requires_grad]
        self.stored: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}  # mb -> (input, output)
        self.pending_w: dict[int, torch.Tensor] = {}  # mb -> scalar whose graph W still needs
        self.sends: list[tuple[Any, torch.Tensor]] = []  # (work, tensor kept alive until waited)
        self.loss = 0.0
        self.n_ops = 0
        self.observer: Callable[[str, int, "StageWorker"], ContextManager] | None = None

    # -- communication: neighbours only ----------------------------------------------------
    def _recv(self, src: int, boundary: int, direction: int, what: str) -> torch.Tensor:
        buf = torch.empty(self.act_shape)
        work = dist.irecv(buf, src, tag=self.tag + 2 * boundary + direction)
        if self.deadlock_after_s is None:
            work.wait()  # blocking; the process group's timeout is the safety net
            return buf
        # Deadlock detection: wait in a helper thread and give up on it after a while (a gloo
        # wait(timeout) would close the connection, and the ranks could no longer report).
        waiter = threading.Thread(target=work.wait, daemon=True)
        waiter.start()
        waiter.join(self.deadlock_after_s)
        if waiter.is_alive():
            raise PipelineStuck(
                f"stage {self.stage} waited {self.deadlock_after_s:g} s for {what} "
                f"from rank {src} (its op #{self.n_ops}), and it never came"
            )
        return buf

    def _send(self, t: torch.Tensor, dst: int, boundary: int, direction: int) -> None:
        work = dist.isend(t, dst, tag=self.tag + 2 * boundary + direction)
        self.sends.append((work, t))

    def _observe(self, op: str, i: int) -> ContextManager:
        return self.observer(op, i, self) if self.observer else nullcontext()

    # -- the operations ----------------------------------------------------------------------
    def forward(self, i: int) -> None:
        """F: receive micro-batch i's activation (stage 0: its tokens), run, send the output."""
        self.n_ops += 1
        if self.first:
            x = self.inputs[i]  # (b, T) token ids
        else:
            x = self._recv(self.prev_rank, self.stage - 1, FWD, f"the activation of F{i}")
            x.requires_grad_()  # we need d loss / d x to send back
        with self._observe("F", i):
            y = self.module(x)  # (b, T, C), or logits (b, T, V) on the last stage
            if self.last:  # mean over the GLOBAL batch: each micro-batch weighs 1/m
                y = lm_loss(y, self.targets[i]) / self.m
            self.stored[i] = (x, y)
        if self.last:
            self.loss += y.item()
        else:
            self._send(y.detach(), self.next_rank, self.stage, FWD)

    def _output_grad(self, i: int) -> torch.Tensor:
        """The scalar to differentiate: the loss on the last stage, else sum(y * dL/dy)."""
        x, y = self.stored[i]
        if self.last:
            return y
        grad = self._recv(self.next_rank, self.stage, BWD, f"the gradient of micro-batch {i}")
        # (y * grad).sum() back-propagates exactly grad into y: = y.backward(grad) bit for bit,
        # without its one-off import of sympy (~1-2 s per process on first use).
        return (y * grad).sum()

    def backward(self, i: int) -> None:
        """B and W at once: all gradients of micro-batch i; send d loss / d input back."""
        self.n_ops += 1
        self._check_forward_done(i, "B")
        s = self._output_grad(i)
        x, _ = self.stored[i]
        with self._observe("BW", i):
            s.backward()  # ADDS into .grad: the micro-batches accumulate
            del self.stored[i]  # its activations are freed with the graph
        if not self.first:
            self._send(x.grad, self.prev_rank, self.stage - 1, BWD)

    def backward_input(self, i: int) -> None:
        """B: only d loss / d input of micro-batch i (on the critical path: the previous stage
        waits for it). Keeps the graph for W. Stage 0's input is token ids: nothing to send."""
        self.n_ops += 1
        self._check_forward_done(i, "B")
        s = self._output_grad(i)
        x, _ = self.stored[i]
        with self._observe("B", i):
            dx = None if self.first else torch.autograd.grad(s, x, retain_graph=True)[0]
            self.pending_w[i] = s
        if dx is not None:
            self._send(dx, self.prev_rank, self.stage - 1, BWD)

    def backward_weight(self, i: int) -> None:
        """W: d loss / d weights of micro-batch i, added into .grad; frees its activations."""
        self.n_ops += 1
        if i not in self.pending_w:
            raise RuntimeError(
                f"stage {self.stage}: W{i} before B{i} (the weight gradient "
                "needs the output gradient that B receives)"
            )
        with self._observe("W", i):
            torch.autograd.backward(self.pending_w.pop(i), inputs=self.params)
            del self.stored[i]

    def _check_forward_done(self, i: int, op: str) -> None:
        if i not in self.stored or i in self.pending_w:
            raise RuntimeError(f"stage {self.stage}: {op}{i} before F{i}, or twice")

    def finish(self) -> None:
        """Wait for every outstanding send (all must have been received)."""
        for work, _ in self.sends:
            work.wait()
        self.sends.clear()
