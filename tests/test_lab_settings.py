"""What `make lab` installs into the environment (lab_utils.tools.nbtools.install_lab_settings):
JupyterLab defaults, and the server extension that sends kernel messages at once."""

from __future__ import annotations

import importlib
import json

from lab_utils.tools.nbtools import LAB_SETTINGS, SERVER_EXTENSIONS, install_lab_settings


class FakeHandler:
    nodelay = None

    def set_nodelay(self, value: bool) -> None:
        self.nodelay = value

    async def open(self, kernel_id: str) -> None:
        self.opened = kernel_id


def test_settings_and_server_extension_are_written_and_merged(tmp_path):
    overrides = tmp_path / "share" / "jupyter" / "lab" / "settings" / "overrides.json"
    overrides.parent.mkdir(parents=True)
    overrides.write_text(json.dumps({"other:plugin": {"kept": 1}}))
    install_lab_settings(str(tmp_path))
    merged = json.loads(overrides.read_text())
    assert merged["other:plugin"] == {"kept": 1} and all(p in merged for p in LAB_SETTINGS)
    conf = tmp_path / "etc" / "jupyter" / "jupyter_server_config.d" / "lab_utils.json"
    assert json.loads(conf.read_text()) == {"ServerApp": {"jpserver_extensions": SERVER_EXTENSIONS}}
    for module in SERVER_EXTENSIONS:  # importable, with the hook jupyter_server calls
        assert callable(importlib.import_module(module)._load_jupyter_server_extension)


def test_the_extension_switches_nagle_off_before_the_websocket_opens(monkeypatch):
    import asyncio
    from types import SimpleNamespace

    from jupyter_server.services.kernels import websocket

    from lab_utils.tools import jupyter_nodelay

    monkeypatch.setattr(websocket, "KernelWebsocketHandler", FakeHandler)
    log = []
    app = SimpleNamespace(log=SimpleNamespace(info=log.append))
    jupyter_nodelay._load_jupyter_server_extension(app)
    jupyter_nodelay._load_jupyter_server_extension(app)  # loaded twice: patched once
    handler = FakeHandler()
    asyncio.run(handler.open("k1"))
    assert (handler.nodelay, handler.opened, len(log)) == (True, "k1", 1)
