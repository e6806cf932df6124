"""Two `dupq serve` on one Postgres table, each killed with kill -9 once: is every acknowledged add stored once?

A table of a private pgserver PostgreSQL (pgvector) holds a few questions (the bundled model); two
``dupq serve --workers 2`` serve it. ``--clients`` threads add ``--adds`` new questions through
both, each under a key of its own, as a client behind a load balancer would: a request that gets
no answer (connection refused or cut, a 503) is sent again with the same key to the next server
until one acknowledges it. When a third of the adds are acknowledged the first server is killed
with SIGKILL (its supervisor and its workers at once), and started again; at two thirds the
second. Afterwards the table is read: ``lost`` (acknowledged, not stored) and ``twice`` (a question
stored more than once) are the figures that count (0 is the promise). Then one question is
removed through the first server and one updated through the second, and both servers are
searched (a new connection per search, so each worker answers some) for a second: ``stale`` counts
answers that still showed the old question. Prints one JSON line.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from contextlib import AbstractContextManager, ExitStack
from pathlib import Path
from typing import Annotated

import typer

from dupq_lab import launch

DUPQ = [sys.executable, "-c", "from dupq.cli import main; main()"]
TOKEN = "two-servers-token"
SEEN_WITHIN_S = 1.0  # a remove or an update must show on every worker this soon after its answer
STARTUP_S = 300  # a server's start on a loaded machine (two workers, each loading torch and the model)
PROBES = 20  # searches per server after a remove or an update, each on a new connection


def ask(url: str, body: dict | None = None, method: str = "POST") -> tuple[int, dict | None]:
    return launch.ask(url, body, method, TOKEN)


def family(pid: int) -> list[int]:
    """``pid`` and every process it started, and theirs (Linux' /proc)."""
    pids = [pid]
    for p in pids:
        try:
            for task in Path(f"/proc/{p}/task").iterdir():
                pids += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            continue
    return pids


def kill_hard(pid: int) -> None:
    """SIGKILL a server's supervisor and its workers at once: nothing of it finishes what it was doing."""
    for p in family(pid):
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass


def measure(location: str, start: Callable[[], AbstractContextManager], adds: int, clients: int = 4) -> dict:
    """Add ``adds`` keyed questions through two servers of ``location`` (``start()`` serves it: a ``with`` whose
    value has ``url`` and ``proc``), killing each once; then a remove and an update. The figures."""
    from dupq.collection.collection import Collection

    acknowledged: set[str] = set()
    tries = {"sent": 0, "unanswered": 0, "refused_503": 0, "other": 0}
    lock = threading.Lock()
    todo = iter(range(adds))
    restarts = []
    with ExitStack() as stack:
        servers = [stack.enter_context(start()) for _ in range(2)]
        urls = [s.url for s in servers]  # where the clients send: a restarted server's new URL replaces its old one

        def client(n: int) -> None:
            turn = n
            while True:
                with lock:
                    i = next(todo, None)
                if i is None:
                    return
                key = f"k{i}"
                body = {"text": f"How do I fix error {i} in the help desk app?", "key": key, "metadata": {"item": key}}
                while True:
                    turn += 1
                    status, _ = ask(urls[turn % 2] + "/questions", body)
                    with lock:
                        tries["sent"] += 1
                        if status in (200, 201):
                            acknowledged.add(key)
                            break
                        tries["unanswered" if status == 0 else "refused_503" if status == 503 else "other"] += 1
                    time.sleep(0.05)

        threads = [threading.Thread(target=client, args=(n,)) for n in range(clients)]
        started = time.monotonic()
        for t in threads:
            t.start()
        for n in range(2):
            while len(acknowledged) < adds * (n + 1) // 3 and any(t.is_alive() for t in threads):
                time.sleep(0.02)
            killed_at, before = time.monotonic(), len(acknowledged)
            kill_hard(servers[n].proc.pid)
            servers[n] = stack.enter_context(start())
            urls[n] = servers[n].url
            restarts.append({"after_acknowledged": before, "down_s": round(time.monotonic() - killed_at, 1)})
        for t in threads:
            t.join()
        adding_s = time.monotonic() - started
        with Collection.open(location) as coll:
            rows = coll.stored_rows()
        keys = {key for _, key, _, _ in rows}
        texts = Counter(text for _, _, text, _ in rows)  # a question stored twice, under its key or none
        seen = seen_everywhere(urls)
    return {
        "adds": adds,
        "acknowledged": len(acknowledged),
        "lost": len(acknowledged - keys),
        "twice": sum(n - 1 for n in texts.values()),
        "stored": sum(1 for key in keys if key and key.startswith("k")),
        "adds_per_s": round(adds / adding_s, 1),
        "requests": tries,
        "restarts": restarts,
        **seen,
    }


def seen_everywhere(urls: list[str]) -> dict:
    """Remove ``k0`` through the first server and update ``k1`` through the second; how many of the searches of
    both servers in the next second still showed the old question (``stale``), and the latest one that did."""
    out = {}
    new_text = "Where do I find the invoices of my team's billing account?"
    for name, key, change, fresh in (
        ("remove", "k0", lambda: ask(urls[0] + "/questions/k0", method="DELETE"), lambda hits: not hits),
        (
            "update",
            "k1",
            lambda: ask(urls[1] + "/questions/k1", {"text": new_text}, method="PUT"),
            lambda hits: bool(hits) and hits[0]["text"] == new_text,
        ),
    ):
        status, _ = change()
        answered = time.monotonic()
        stale, last_stale, probes = 0, None, 0
        while probes < 2 * PROBES or time.monotonic() - answered < SEEN_WITHIN_S:
            status_s, found = ask(urls[probes % 2] + "/search", {"question": new_text, "k": 5, "filter": {"item": key}})
            at = time.monotonic() - answered
            probes += 1
            if status_s != 200 or not fresh(found["results"]):
                stale += 1
                last_stale = round(at, 3)
        out[name] = {"status": status, "probes": probes, "stale": stale, "last_stale_s": last_stale}
    return out


def main(
    adds: Annotated[int, typer.Option(min=3, help="Keyed questions added through the two servers.")] = 20_000,
    clients: Annotated[int, typer.Option(min=1, help="Threads adding, each waiting for its answer.")] = 4,
    workers: Annotated[int, typer.Option(min=1, help="dupq serve --workers of each server.")] = 2,
) -> None:
    from dupq.collection.collection import Collection
    from dupq.modeling.model import Model
    from dupq_lab.speed.pgvector_speed import private_postgres

    env = {**os.environ, "DUPQ_API_TOKEN": TOKEN, "OMP_NUM_THREADS": "1"}
    with tempfile.TemporaryDirectory(prefix="dupq-two-servers-") as tmp, private_postgres(Path(tmp)) as server:
        location = f"{server}&table=two_servers"
        seeds = [f"How can I reset my password on device {i}?" for i in range(20)]
        Collection.build(location, seeds, Model.load(), keys=[f"seed{i}" for i in range(20)]).close()
        serve = ["--workers", str(workers)]
        figures = measure(
            location, lambda: launch.served(location, *serve, command=DUPQ, env=env, startup=STARTUP_S), adds, clients
        )
    print(json.dumps({**figures, "clients": clients, "workers": workers, "servers": 2, "cpus": os.cpu_count()}))
