"""Running the service for a test: in a thread of this process, or as ``dupq serve`` in another.

The test suite (its fault cases too) starts servers and talks to them over real sockets; this is
its one harness, like ``fastapi.testclient`` is FastAPI's. Both kinds of server run under
:func:`~dupq.service.connections.server_config`, the configuration ``dupq serve`` uses, so what a
test checks is what a user runs.

>>> with LiveServer(create_app("runs/faq", token="t")) as server:       # doctest: +SKIP
...     http(server.url + "/health").status
200
"""

from __future__ import annotations

import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from typing import NamedTuple

from dupq.service.connections import server_config

STARTUP = 60.0  # seconds a server may take to start answering


def free_port() -> int:
    """A loopback port nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Answer(NamedTuple):
    status: int
    body: bytes
    headers: dict[str, str]  # names in lower case


def http(
    url: str, body: bytes | None = None, headers: dict | None = None, method: str | None = None, timeout: float = 30
) -> Answer:
    """One request (JSON unless ``headers`` say otherwise); an error status is an answer too, not an exception."""
    headers = {"Content-Type": "application/json", **(headers or {})}
    request = urllib.request.Request(url, data=body, headers=headers, method=method)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as r:
            return Answer(r.status, r.read(), {k.lower(): v for k, v in r.headers.items()})
    except urllib.error.HTTPError as e:
        return Answer(e.code, e.read(), {k.lower(): v for k, v in e.headers.items()})


class LiveServer:
    """uvicorn serving ``app`` on a free loopback port in a thread, for as long as the ``with`` lasts."""

    def __init__(self, app, **config):
        import uvicorn

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.server = uvicorn.Server(server_config(app, host="127.0.0.1", port=self.port, **config))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> LiveServer:
        self.thread.start()
        deadline = time.monotonic() + STARTUP
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.05)
        return self

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


class ServeProcess:
    """``dupq serve COLLECTION`` in a subprocess on a free port, for as long as the ``with`` lasts (or until killed).

    ``command`` is how to run the CLI (default: this interpreter running ``dupq.cli``); ``env``
    and ``preexec_fn`` go to :class:`subprocess.Popen` (a test may lower the child's limits); ``startup``
    is how many seconds it may take to start answering.
    """

    def __init__(
        self, collection, *extra: str, command: list[str] | None = None, env=None, preexec_fn=None, startup=STARTUP
    ):
        self.startup = startup
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        command = command or [sys.executable, "-c", "from dupq.cli import main; main()"]
        command = [*command, "serve", str(collection), "--port", str(self.port), *extra]
        self._log = tempfile.TemporaryFile()  # not a pipe: a server that logs much would block on a full one
        self.proc = subprocess.Popen(
            command, stdout=subprocess.DEVNULL, stderr=self._log, env=env, preexec_fn=preexec_fn
        )

    def __enter__(self) -> ServeProcess:
        deadline = time.monotonic() + self.startup
        while time.monotonic() < deadline and self.proc.poll() is None:
            try:
                if http(self.url + "/", method="HEAD").status == 200:
                    return self
            except OSError:
                time.sleep(0.2)
        self.__exit__()
        raise RuntimeError("the server did not start: " + self.stderr()[-2000:])

    def __exit__(self, *exc) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def stderr(self) -> str:
        """What the server has written on stderr so far."""
        self._log.seek(0)
        return self._log.read().decode("utf-8", "replace")


def metric(text: str, name: str, **labels) -> float:
    """The value of sample ``name`` with ``labels`` in a Prometheus text exposition (0 when absent)."""
    from prometheus_client.parser import text_string_to_metric_families

    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return sample.value
    return 0.0
