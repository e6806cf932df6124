"""`dupq index reencode` of a collection that `dupq serve` serves while writers add to it: are the adds made
during the re-encoding in the new collection?

Builds a collection of synthetic questions (the bundled model) in a temporary folder, serves it,
starts ``--writers`` clients that add new questions (``POST /questions``) as fast as they are
answered, and re-encodes the collection with the bundled model into a new one meanwhile. The
command says what it copied (``copied N questions read at the start and M added ... meanwhile``)
while it still holds the old folder's writer lock, so an add acknowledged before that line was
committed before the lock: the figure that counts is ``missing``, such adds absent from the new
collection (0 is the promise). Prints one JSON line.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Annotated

import typer

from dupq_lab.launch import ask, served

DUPQ = [sys.executable, "-c", "from dupq.cli import main; main()"]
TOKEN = "reencode-token"


def measure(tmp: Path, questions: int, writers: int, workers: int, command: list[str] = DUPQ, env=None) -> dict:
    """Serve a new collection of ``questions`` in ``tmp``, add from ``writers`` clients, re-encode it; the figures."""
    from dupq.collection.collection import Collection
    from dupq.modeling.model import BUNDLED, Model

    env = {**(env or {}), "DUPQ_API_TOKEN": TOKEN, "OMP_NUM_THREADS": "1"}
    texts = [f"How do I learn about topic {i} in step {i * 7}?" for i in range(questions)]
    Collection.build(tmp / "old", texts, Model.load()).close()
    acknowledged: dict[str, float] = {}  # text -> when its 201 came
    stop = threading.Event()
    with served(tmp / "old", "--workers", str(workers), command=command, env=env) as server:
        url = server.url

        def writer(n: int) -> None:
            i = 0
            while not stop.is_set():
                text = f"Writer {n} adds question {i} about {n * 1000 + i}?"
                if ask(url + "/questions", {"text": text}, token=TOKEN)[0] == 201:
                    acknowledged[text] = time.monotonic()
                i += 1

        threads = [threading.Thread(target=writer, args=(n,)) for n in range(writers)]
        for t in threads:
            t.start()
        time.sleep(1)
        started = time.monotonic()
        args = ["index", "reencode", str(tmp / "old"), "--model", str(BUNDLED), "--out", str(tmp / "new")]
        proc = subprocess.Popen([*command, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        said, copied_at = [], None
        for line in proc.stdout:
            said.append(line.decode().strip())
            if copied_at is None and line.startswith(b"copied"):
                copied_at = time.monotonic()
        ended = time.monotonic()
        errors = proc.stderr.read().decode()
        proc.wait()
        stop.set()
        for t in threads:
            t.join()
    cut = copied_at if copied_at is not None else ended  # without the line: what was acknowledged before it ended
    new = set()
    if (tmp / "new").exists():
        with sqlite3.connect(tmp / "new" / "questions.sqlite") as db:
            new = {text for (text,) in db.execute("SELECT text FROM questions")}
    during = [text for text, at in acknowledged.items() if started < at < cut]
    return {
        "questions": questions,
        "writers": writers,
        "workers": workers,
        "reencode_seconds": round(ended - started, 1),
        "adds_during_reencode": len(during),
        "missing": sum(text not in new for text in during),
        "missing_of_all_acknowledged_before": sum(text not in new for text, at in acknowledged.items() if at < cut),
        "new_collection": len(new),
        "said": said,
        "exit": proc.returncode,
        "traceback": "Traceback" in errors,
    }


def main(
    questions: Annotated[int, typer.Option(min=1, help="Questions in the collection re-encoded.")] = 20_000,
    writers: Annotated[int, typer.Option(min=1, help="Threads adding questions while it re-encodes.")] = 4,
    workers: Annotated[int, typer.Option(min=1, help="dupq serve --workers.")] = 2,
) -> None:
    from dupq.modeling.model import BUNDLED

    with tempfile.TemporaryDirectory(prefix="dupq-reencode-") as tmp:
        figures = json.dumps(measure(Path(tmp), questions, writers, workers))
        print(figures.replace(tmp, "TMP").replace(str(BUNDLED), "BUNDLED"))  # no folder of this machine
