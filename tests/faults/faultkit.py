"""What the fault tests share: running the CLI, a collection to damage, a server.

The fault tests (``pytest -m faults``) are one test per class of fault a hostile tester found. Each
runs the installed package as a user does, on the bundled model and synthetic questions, in its own
temporary folder; ``test_mutations.py`` shows, for the tests that could hide a fault, that each fails
on the fault it names. A fault test of a module's own promise lives beside that module's tests,
marked ``faults`` too (``test_collection.py``'s kill -9 during an add). Whatever one encodes in the
test's own process runs on one thread (the repository's ``conftest.py``), as its subprocesses do.

Every fault test runs ``dupq`` as a user does, in a subprocess, through :data:`DUPQ` and
:data:`ENV`, read at each call: ``test_mutations.py`` points them at a deliberately broken build
to show that a test fails on the fault it names. The server harness is :mod:`support.serving`; the
one-sentence check of a refusal is :func:`support.errors.refused`.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

from support.serving import ServeProcess

DUPQ = [sys.executable, "-c", "from dupq.cli import main; main()"]  # how a test runs `dupq`
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "DUPQ_API_TOKEN": "fault-token"}
AUTH = {"Authorization": "Bearer fault-token"}
TOPICS = ["Python", "the sky", "weight", "Mongolia", "volcanoes", "French", "rice", "chess", "taxes", "guitars"]
SECURITY_HEADERS = ("content-security-policy", "x-content-type-options", "x-frame-options", "referrer-policy")
# The options of a tiny training run (``--dim 8``) on :func:`pairs_file`'s 600 rows: a few seconds.
TRAIN = ["--train-pool", "400", "--test-size", "100", "--dev-size", "100", "--dim", "8", "--threads", "1"]
TRAIN += ["--no-progress"]


def synthetic(n: int, offset: int = 0) -> list[str]:
    return [f"How do I learn about {TOPICS[i % len(TOPICS)]} in step {i}?" for i in range(offset, offset + n)]


def dupq(*args: str | bytes, stdin: bytes | None = None, timeout: float = 120, env=None) -> subprocess.CompletedProcess:
    """``dupq *args`` in a subprocess (:data:`ENV` updated with ``env``), its output captured."""
    return subprocess.run([*DUPQ, *args], input=stdin, capture_output=True, timeout=timeout, env={**ENV, **(env or {})})


def clean(run: subprocess.CompletedProcess) -> None:
    """A run that succeeded, with no traceback shown to the user."""
    assert run.returncode == 0 and b"Traceback" not in run.stderr, run.stderr.decode("utf-8", "replace")[-600:]


def build(folder: Path, n: int = 40, index: str = "flat", keys: bool = False, metadata: bool = False) -> Path:
    """A collection of ``n`` synthetic questions (keys ``k0, k1, ...`` and metadata ``{"row": i}`` if asked)."""
    from dupq.collection.collection import Collection
    from dupq.modeling.model import Model

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


def pairs_file(tmp: Path, rows: int = 600) -> Path:
    """A synthetic pairs file: every other row a reworded duplicate, the rest another topic."""
    path = tmp / "pairs.tsv"
    lines = ["id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate"]
    for i in range(rows):
        a = synthetic(1, i)[0]
        b = a.replace("How do I learn about", "What is the best way to learn") if i % 2 else synthetic(1, i + 3)[0]
        lines.append(f"{i}\t{2 * i}\t{2 * i + 1}\t{a}\t{b}\t{i % 2}")
    path.write_text("\n".join(lines) + "\n")
    return path


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

    def __init__(self, folder, *extra: str, preexec_fn=None, env=None):
        super().__init__(folder, *extra, command=DUPQ, env={**ENV, **(env or {})}, preexec_fn=preexec_fn)

    def tracebacks(self) -> int:
        return int("Traceback" in self.stderr())
