"""What the fault tests share: running ``dupq`` as a user does, a collection to damage, a model to break, a server.

Each fault test (``pytest -m faults``) is one class of fault a hostile tester found, run on the bundled model and
synthetic questions in its own temporary folder. ``dupq`` runs through :data:`DUPQ` and :data:`ENV`, read at each
call, so that ``test_mutations.py`` can point them at a deliberately broken build and show that a test fails on
the fault it names. Whatever one encodes in the test's own process runs on one thread (the root ``conftest.py``).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np
from typer.testing import CliRunner

from support.serving import ServeProcess

DUPQ = [sys.executable, "-c", "from dupq.cli import main; main()"]  # how a test runs `dupq`
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "DUPQ_API_TOKEN": "fault-token"}
AUTH = {"Authorization": "Bearer fault-token"}
TOPICS = ["Python", "the sky", "weight", "Mongolia", "volcanoes", "French", "rice", "chess", "taxes", "guitars"]
SECURITY_HEADERS = ("content-security-policy", "x-content-type-options", "x-frame-options", "referrer-policy")
# The options of a tiny training run (``--dim 8``) on :func:`pairs_file`'s 600 rows: a few seconds.
TRAIN = ["--train-pool", "400", "--test-size", "100", "--dev-size", "100", "--dim", "8", "--threads", "1"]
TRAIN += ["--no-progress"]
NESTED = "[" * 1000 + "]" * 1000  # Python's parser recurses once a level: RecursionError, where it is not checked


def synthetic(n: int, offset: int = 0) -> list[str]:
    return [f"How do I learn about {TOPICS[i % len(TOPICS)]} in step {i}?" for i in range(offset, offset + n)]


def dupq(*args: str | bytes, stdin: bytes | None = None, timeout: float = 120, env=None) -> subprocess.CompletedProcess:
    """``dupq *args`` in a subprocess (:data:`ENV` updated with ``env``), its output captured."""
    return subprocess.run([*DUPQ, *args], input=stdin, capture_output=True, timeout=timeout, env={**ENV, **(env or {})})


def in_process(*args, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    """``dupq *args`` through ``CliRunner`` in this process, answered as :func:`dupq` answers."""
    from dupq.cli import app

    result = CliRunner().invoke(app, [os.fsdecode(a) for a in args], input=stdin)  # bytes as argv gives them
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception  # a crash, shown with its traceback
    return subprocess.CompletedProcess(args, result.exit_code, result.stdout_bytes, result.stderr_bytes)


def clean(run: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    """A run that succeeded, with no traceback shown to the user: the run, checked."""
    assert run.returncode == 0 and b"Traceback" not in run.stderr, run.stderr.decode("utf-8", "replace")[-600:]
    return run


def build(folder: Path, n: int = 40, index: str = "flat", keys: bool = False, metadata: bool = False) -> Path:
    """A collection of ``n`` synthetic questions (keys ``k0, k1, ...`` and metadata ``{"row": i}`` if asked)."""
    from dupq.collection.collection import Collection
    from dupq.modeling.model import Model

    keys = [f"k{i}" for i in range(n)] if keys else None
    metadata = [{"row": i} for i in range(n)] if metadata else None
    Collection.build(folder, synthetic(n), Model.load(), index=index, keys=keys, metadata=metadata).close()
    return folder


def folder_of(folder: Path, files: dict[str, str | bytes] | None = None) -> Path:
    """``folder``, made, holding ``files`` (name: text or bytes): a user's folder, or damage to put somewhere."""
    folder.mkdir()
    for name, data in (files or {}).items():
        (folder / name).write_bytes(data if isinstance(data, bytes) else data.encode())
    return folder


def stored(folder: Path) -> list[tuple]:
    with sqlite3.connect(folder / "questions.sqlite") as db:
        return db.execute("SELECT id, key, text FROM questions ORDER BY id").fetchall()


def sql(folder: Path, statement: str, *params) -> None:
    """One statement on a collection's SQLite file, committed (damage done by "another writer")."""
    with sqlite3.connect(folder / "questions.sqlite") as db:
        db.execute(statement, params)


def model_copy(folder: Path) -> Path:
    """A copy of the bundled model in ``folder``, to damage or write over."""
    from dupq.modeling.model import BUNDLED

    return Path(shutil.copytree(BUNDLED, folder))


def pairs_file(tmp: Path, rows: int = 600, labels: list[int] | None = None, name: str = "pairs.tsv") -> Path:
    """A synthetic pairs file: every other row a reworded question, the rest two topics; labelled so (or ``labels``)."""
    lines = ["id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate"]
    for i, label in enumerate([i % 2 for i in range(rows)] if labels is None else labels):
        a = synthetic(1, i)[0]
        b = a.replace("How do I learn about", "What is the best way to learn") if i % 2 else synthetic(1, i + 3)[0]
        lines.append(f"{i}\t{2 * i}\t{2 * i + 1}\t{a}\t{b}\t{label}")
    (tmp / name).write_text("\n".join(lines) + "\n")
    return tmp / name


def fake_teacher(calls: list[str] | None = None):
    """A deterministic teacher of 16 dimensions (each text's vector seeded by its hash), recording what it encodes."""

    def encode(texts: list[str]) -> np.ndarray:
        if calls is not None:
            calls.extend(texts)
        seeds = [int.from_bytes(hashlib.sha256(t.encode()).digest()[:4], "little") for t in texts]
        vectors = np.stack([np.random.default_rng(s).standard_normal(16) for s in seeds]).astype(np.float32)
        return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)

    return encode


def client(folder):
    """The service of ``folder`` in this process (FastAPI's TestClient, write token ``fault-token``)."""
    from fastapi.testclient import TestClient

    from dupq.service.app import create_app

    return TestClient(create_app(folder, token="fault-token"), raise_server_exceptions=False)


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

    def workers(self) -> list[int]:
        """The pids of the server's workers (``--workers``), not multiprocessing's resource tracker."""
        children = []
        for task in Path(f"/proc/{self.proc.pid}/task").iterdir():
            children += [int(pid) for pid in (task / "children").read_text().split()]
        return sorted(pid for pid in children if b"spawn_main" in Path(f"/proc/{pid}/cmdline").read_bytes())
