"""Measurement inside a rank: memory ledger, communication ledger, timeline (labs 01-10).

    from lab_utils.measure import CommLedger, model_state_bytes, SavedActivations, \
        peak_memory_bytes, Timeline

    model_state_bytes(model, opt)  -> {params, grads, optimizer, total, ...} bytes   (lab 01)
    SavedActivations(model)        -> .bytes / .count saved for backward            (labs 01, 02)
    step_memory.record_steps(...)  -> bytes held at every event of training steps   (lab 01)
    peak_memory_bytes(device)      -> CUDA peak allocated bytes, None on CPU
    CommLedger()                   -> every collective / p2p call: op, bytes, time  (labs 03-08)
    Timeline(ctx)                  -> named spans per rank, gathered to rank 0      (labs 04, 07)

One module per way of observing (every one seen from OUTSIDE the technique it measures):

    memory.py          model state bytes, saved activations, device peak        (labs 01, 02, 05-07)
    step_memory.py     memory at every event of a training step, any device     (lab 01)
    comm.py            CommLedger: every collective / p2p call of one rank       (labs 03-08)
    comm_ops.py        which c10d op a dispatcher call is and its bytes (for comm.py)
    wire.py            WireMeter: what each rank's sockets REALLY sent, to whom  (labs 03-08)
    tcp.py             the kernel's per-socket byte counts (for wire.py)
    timeline.py        Timeline: named spans per rank on a common clock          (labs 04, 07, 10)
    spans.py           ModuleSpans: compute spans of chosen modules, by hooks    (lab 05)
    noise_scale.py     the gradient noise scale from two batch sizes (McCandlish 2018) (lab 02)

The measured numbers are meant to sit next to a calculator's prediction (``lab_utils.calc``).
"""

from lab_utils.measure.comm import CommLedger, CommRecord
from lab_utils.measure.memory import (
    SavedActivations,
    model_state_bytes,
    peak_memory_bytes,
    reset_peak_memory,
)
from lab_utils.measure.timeline import Timeline

__all__ = [
    "CommLedger",
    "CommRecord",
    "model_state_bytes",
    "SavedActivations",
    "peak_memory_bytes",
    "reset_peak_memory",
    "Timeline",
]

# Wire bytes: what the kernel counted leaving each rank's sockets (labs 03-08)
#   WireMeter(ctx) -> .sent / .sent_to / .control / .method / .result()    (measure/wire.py)
from lab_utils.measure.wire import (
    BYTE_UNITS,
    GLOO_HEADER_BYTES,
    WireBytes,
    WireMeter,  # noqa: E402
    byte_row,
    wire_matrix,
)

__all__ += ["WireMeter", "WireBytes", "wire_matrix", "byte_row", "BYTE_UNITS", "GLOO_HEADER_BYTES"]
