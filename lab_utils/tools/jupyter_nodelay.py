"""A Jupyter server extension: the kernel websocket sends each message at once (TCP_NODELAY).

Tornado leaves Nagle's algorithm on for websockets and jupyter_server does not switch it off, so a
small message written right after another waits for the browser's delayed ACK (40 ms on Linux
loopback): measured as about 40 of the 50 ms an explorer's redraw took from the Enter key to the
new figure's arrival (benchmarks/bench_widgets.py). ``make lab`` and the browser tests load it.
"""

from __future__ import annotations

from typing import Any


def _load_jupyter_server_extension(serverapp: Any) -> None:
    from jupyter_server.services.kernels.websocket import KernelWebsocketHandler

    if getattr(KernelWebsocketHandler, "_lab_nodelay", False):
        return
    opened = KernelWebsocketHandler.open

    async def open(self, *args: Any, **kwargs: Any) -> None:
        self.set_nodelay(True)
        await opened(self, *args, **kwargs)

    KernelWebsocketHandler.open = open
    KernelWebsocketHandler._lab_nodelay = True
    serverapp.log.info("lab_utils: kernel websockets send without delay (TCP_NODELAY)")
