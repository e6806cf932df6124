"""What the lab's measurements start: ``dupq serve`` in a subprocess, and a Ray head node on 127.0.0.1.

The test suite has fuller harnesses of its own (tests/support); the lab keeps this small copy
because it imports nothing of the tests.
"""

from __future__ import annotations

import csv
import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import NamedTuple

ENV = {**os.environ, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}  # the cluster on 127.0.0.1, as the driver expects
STARTUP = 60.0  # seconds a server may take to start answering


def free_port() -> int:
    """A loopback port nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ask(url: str, body: dict | None = None, method: str = "POST", token: str = "") -> tuple[int, dict | None]:
    """One JSON request (with ``token`` as its bearer): its status and answer; (0, None) when no answer came
    (refused, cut, timed out)."""
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {token}"} if token else {})}
    data = None if body is None else json.dumps(body).encode()
    try:
        with urllib.request.urlopen(urllib.request.Request(url, data, headers, method=method), timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, None
    except (OSError, http.client.HTTPException):
        return 0, None


class Served(NamedTuple):
    url: str
    proc: subprocess.Popen  # the supervisor (``--workers``) or the one server process


@contextmanager
def served(
    collection, *extra: str, command: list[str], env: dict | None = None, startup: float = STARTUP
) -> Iterator[Served]:
    """``dupq serve COLLECTION`` (``command`` runs the CLI) on a free loopback port while the ``with`` lasts
    (or until killed): its URL and process; ``startup``: the seconds it may take to start answering."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = tempfile.TemporaryFile()  # not a pipe: a server that logs much would block on a full one
    serve = [*command, "serve", str(collection), "--port", str(port), *extra]
    proc = subprocess.Popen(serve, stdout=subprocess.DEVNULL, stderr=log, env=env)
    try:
        deadline = time.monotonic() + startup
        while not _answers(url):
            if proc.poll() is not None or time.monotonic() > deadline:
                log.seek(0)
                raise SystemExit("the server did not start: " + log.read().decode("utf-8", "replace")[-2000:])
            time.sleep(0.2)
        yield Served(url, proc)
    finally:
        if proc.poll() is None:
            proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(urllib.request.Request(url + "/", method="HEAD"), timeout=5) as r:
            return r.status == 200
    except OSError:
        return False


@contextmanager
def local_cluster(cpus: int = 2) -> Iterator[str]:
    """A Ray head node on 127.0.0.1 with ``cpus`` CPUs, as its address ``127.0.0.1:PORT``; stopped on exit.

    ``ray start --head`` runs in a temporary folder of its own; afterwards every process whose
    command line names that folder is stopped, so nothing of another cluster on the machine is touched.
    """
    folder = tempfile.mkdtemp(prefix="rt", dir="/tmp")  # short: Ray's socket paths have a length limit
    port = free_port()
    subprocess.run(
        [Path(sys.executable).with_name("ray"), "start", "--head", f"--port={port}", "--node-ip-address=127.0.0.1",
         f"--num-cpus={cpus}", "--include-dashboard=false", "--disable-usage-stats", f"--temp-dir={folder}"],
        env=ENV, check=True, capture_output=True, timeout=180,
    )  # fmt: skip
    try:
        yield f"127.0.0.1:{port}"
    finally:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for pid in _started_in(folder):
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
            time.sleep(2)
        shutil.rmtree(folder, ignore_errors=True)


def _started_in(folder: str) -> list[int]:
    pids = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and folder.encode() in (proc / "cmdline").read_bytes():
                pids.append(int(proc.name))
        except OSError:
            continue
    return pids


def same_group_pairs(path: Path) -> set[tuple[str, str]]:
    """The pairs of keys that a `dupq dedup` groups file puts in one group."""
    groups: dict[str, list[str]] = {}
    for row in csv.DictReader(path.open()):
        groups.setdefault(row["cluster"], []).append(row["key"])
    return {(a, b) for g in groups.values() for a in g for b in g if a < b}
