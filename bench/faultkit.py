"""What the fault cases share: the result of a case, running the CLI, a collection to damage, a server.

Every ``bench/fault_cases_*.py`` module imports what it needs from here (``faults``, the runner,
re-exports the same names). The server harness is the test suite's, :mod:`dupq_lab.serving`.

A case runs the CLI through :data:`DUPQ` and :data:`ENV`, read at each call: the fault suite's
own test (``tests/test_fault_suite.py``) points them at a deliberately broken build to show that
each case reports the fault it names.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from dupq_lab.serving import Answer, ServeProcess, free_port
from dupq_lab.serving import http as request

DUPQ = [sys.executable, "-c", "from dupq.cli import main; main()"]  # how a case runs `dupq`
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "DUPQ_API_TOKEN": "fault-token"}
AUTH = {"Authorization": "Bearer fault-token"}
TOPICS = ["Python", "the sky", "weight", "Mongolia", "volcanoes", "French", "rice", "chess", "taxes", "guitars"]
SECURITY_HEADERS = ("content-security-policy", "x-content-type-options", "x-frame-options", "referrer-policy")

__all__ = [
    "AUTH",
    "DUPQ",
    "ENV",
    "SECURITY_HEADERS",
    "TOPICS",
    "Answer",
    "Result",
    "Server",
    "build",
    "dupq",
    "free_port",
    "http",
    "lacks_headers",
    "refused",
    "request",
    "stored",
    "strict_json",
    "synthetic",
]


@dataclass
class Result:
    survived: bool  # dupq behaved as it promises
    data_lost: int = 0  # acknowledged questions missing afterwards
    tracebacks: int = 0  # tracebacks a user saw
    server_500s: int = 0  # answers with status 500 (a bug's answer; a deliberate 503 or 507 is not one)
    detail: str = ""


def synthetic(n: int, offset: int = 0) -> list[str]:
    return [f"How do I learn about {TOPICS[i % len(TOPICS)]} in step {i}?" for i in range(offset, offset + n)]


def dupq(*args: str | bytes, stdin: bytes | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([*DUPQ, *args], input=stdin, capture_output=True, timeout=timeout, env=ENV)


def refused(run: subprocess.CompletedProcess, saying: str = "") -> tuple[bool, int]:
    """A user mistake answered as dupq promises: exit 2, one ``error:`` sentence (holding ``saying``), no traceback."""
    err = run.stderr.decode("utf-8", "replace")
    lines = [line for line in err.strip().splitlines() if not line.startswith(("skipped", "warning"))]
    ok = run.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: ") and saying in lines[0]
    return ok, int("Traceback" in err)


def build(folder: Path, n: int = 40, index: str = "flat", keys: bool = False, metadata: bool = False) -> Path:
    """A collection of ``n`` synthetic questions (keys ``k0, k1, ...`` and metadata ``{"row": i}`` if asked)."""
    from dupq.modeling.model import Model
    from dupq.search.collection import Collection

    Collection.build(
        folder,
        synthetic(n),
        Model.load(),
        index=index,
        keys=[f"k{i}" for i in range(n)] if keys else None,
        metadata=[{"row": i} for i in range(n)] if metadata else None,
    ).close()
    return folder


def stored(folder: Path) -> list[tuple]:
    with sqlite3.connect(folder / "questions.sqlite") as db:
        return db.execute("SELECT id, key, text FROM questions ORDER BY id").fetchall()


def http(
    url: str, body: bytes | None = None, headers: dict | None = None, method: str | None = None
) -> tuple[int, bytes]:
    """``(status, body)`` of one request (:func:`request` also gives the headers)."""
    answer = request(url, body, headers, method)
    return answer.status, answer.body


def lacks_headers(answer) -> bool:
    """Whether an answer (ours, or a TestClient response) misses any of the security headers."""
    headers = {k.lower() for k in answer.headers}
    return any(name not in headers for name in SECURITY_HEADERS)


def strict_json(text: bytes | str) -> bool:
    """Whether ``text`` is JSON that any reader takes: no ``NaN`` or ``Infinity``."""

    def refuse(constant):
        raise ValueError(constant)

    try:
        json.loads(text, parse_constant=refuse)
        return True
    except ValueError:
        return False


class Server(ServeProcess):
    """``dupq serve`` in a subprocess, run as :data:`DUPQ` says (the harness is :class:`ServeProcess`)."""

    def __init__(self, folder, *extra: str, preexec_fn=None):
        super().__init__(folder, *extra, command=DUPQ, env=ENV, preexec_fn=preexec_fn)

    def tracebacks(self) -> int:
        return int("Traceback" in self.stderr())
