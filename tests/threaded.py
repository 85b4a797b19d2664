"""An ASGI app under uvicorn on a thread, on a real loopback socket: the stand-in servers' one way to run."""

from __future__ import annotations

import socket
import threading

import uvicorn
from waiting import wait_until


class Threaded:
    """Serves `app` on 127.0.0.1:`port` (0: a free port) from enter to exit; `.url`, `.port`."""

    def __init__(self, app, port: int = 0):
        self.app, self.port, self.url = app, port, ""
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    def __enter__(self) -> Threaded:
        sock = socket.create_server(("127.0.0.1", self.port))
        self.port = sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(self.app, log_level="warning", access_log=False, lifespan="off")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [sock]}, daemon=True)
        self._thread.start()
        wait_until(lambda: self._server.started, "the server started", timeout=30)  # uvicorn's only sign
        return self

    def __exit__(self, *exc) -> None:
        self._server.should_exit = True
        self._thread.join()
