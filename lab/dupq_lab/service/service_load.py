"""Load and fault test of ``dupq serve`` on loopback: throughput, latency, and ``kill -9`` during adds.

1. Takes a collection of the Quora questions (``--collection``), or builds one with
   ``dupq index build DATA --index hnsw`` (every distinct question it can read, ~537,600, by qid), and works
   on a copy of it, so the original is never changed.
2. *In process*: ``Collection.search([q], k=10)`` one query at a time on one thread, in this
   process, on the same copy with the same code, for ``--single-seconds``: the rate one core
   gives without HTTP. The service's rates are read against it (``ratio_to_in_process``), as
   absolute rates drift between machines.
3. Starts ``dupq serve COPY --port P [--workers N]`` on 127.0.0.1 as a subprocess (in its own
   session) with a random token, and waits until every worker has started.
4. ``--clients`` concurrent clients (16), each with its own keep-alive connection, for
   ``--seconds`` per phase: *search* (searches only: the target), then *mixed* (searches and,
   with probability ``--add-share``, adds). Each phase reports requests/s, p50/p99 latency and
   errors (anything but a 2xx, or a broken connection).
5. *kill -9*: the clients only add; after ``--kill-after`` seconds the server's whole process
   group (the supervisor and every worker) gets SIGKILL. The server is restarted on the same
   folder, and every add that got a 2xx answer is looked up: a search for its text must return
   its id and text, and where the approximate (HNSW) search misses it, its row must be in the
   collection's SQLite file once the server has stopped; the count must have grown by at least
   the acknowledged adds.

Prints one JSON line. Bounded: every phase stops after its seconds or ``--max-requests``, the
server start waits at most ``--start-timeout`` s, and the server is always stopped at the end.
The clients are in :mod:`dupq_lab.service.http_load`. ``--workers`` is passed to ``dupq serve`` only when given
(code without the option serves from one process).

    dupq-lab service-load --index hnsw --seconds 20 --workers 2   # builds with the bundled model
    dupq-lab service-load --collection runs/bench-service/quora-hnsw-bundled
"""

from __future__ import annotations

import asyncio
import json
import os
import platform
import random
import secrets
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Annotated, Optional

import typer

from dupq_lab.launch import ask, free_port
from dupq_lab.options import (
    DATA,
    WORK,
    CollectionFolder,
    Data,
    Index,
    ModelFolder,
    Seconds,
    Seed,
    Work,
    child,
    last_json,
    latency_ms,
)
from dupq_lab.service.http_load import HOST, adds_until_killed, run_phase, verify


def stored(collection: Path, acked: list[tuple[int, str]], ids: list[int]) -> list[int]:
    """Of ``ids`` (acknowledged adds a search did not return: HNSW is approximate), those whose row
    is in the collection's SQLite file, the store of record, with the acknowledged text."""
    import sqlite3

    texts = dict(acked)
    db = sqlite3.connect(f"file:{collection / 'questions.sqlite'}?mode=ro", uri=True)
    try:
        return [i for i in ids if db.execute("SELECT text FROM questions WHERE id = ?", (i,)).fetchone() == (texts[i],)]
    finally:
        db.close()


def start_server(collection: Path, port: int, token: str, log, args: SimpleNamespace):
    """``dupq serve`` in its own session, once ``/health`` answers and every worker has started: ``(process, seconds)``."""
    command = [sys.executable, "-m", "dupq.cli", "serve", str(collection), "--host", HOST, "--port", str(port)]
    command += ["--workers", str(args.workers)] if args.workers else []  # not given: code without the option runs too
    several = args.workers if args.workers and args.workers > 1 else 0  # startup lines to wait for
    started = time.perf_counter()
    log.flush()
    logged = log.tell()  # this start's lines follow
    env = {**code_env(args), "DUPQ_API_TOKEN": token}
    # its own session (pgid == pid): kill -9 reaches every worker
    server = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    while time.perf_counter() - started < args.start_timeout:
        if server.poll() is not None:
            raise SystemExit(f"dupq serve exited with status {server.returncode}; see {log.name}")
        if health(port) is not None and workers_started(Path(log.name), logged) >= several:
            return server, time.perf_counter() - started
        time.sleep(0.2)
    os.killpg(server.pid, signal.SIGKILL)
    raise SystemExit(f"dupq serve did not answer /health within {args.start_timeout:.0f} s; see {log.name}")


def workers_started(log: Path, offset: int) -> int:
    """Workers that logged uvicorn's startup line since ``offset`` of the server log (several workers log it; one does not)."""
    with open(log, "rb") as f:
        f.seek(offset)
        return f.read().count(b"Application startup complete")


def code_env(args: SimpleNamespace) -> dict:
    """The environment of every child process: ``--code`` first on the module path, when given."""
    if args.code is None:
        return dict(os.environ)
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(args.code), os.environ.get("PYTHONPATH")]))}


def in_process_child(copy: Path, searches: list[str], seconds: float, args: SimpleNamespace) -> dict:
    """:func:`in_process` in a child process that imports the code under test (``--code``)."""
    queries = args.work / "in-process-queries.json"
    queries.write_text(json.dumps(searches))
    command = [sys.executable, "-m", "dupq_lab", "service-load", "--in-process", copy, queries]
    command += ["--single-seconds", seconds]
    return last_json(child(command, "the in-process search run", env=code_env(args)))


def one_thread() -> None:
    """One thread for torch, FAISS and the BLAS (NumPy's products: dupq.modeling.kernels)."""
    import faiss
    import torch
    from threadpoolctl import threadpool_limits

    torch.set_num_threads(1)
    faiss.omp_set_num_threads(1)
    threadpool_limits(1, user_api="blas")


def timed_searches(coll, queries: list[str], seconds: float) -> dict:
    """``coll.search([q], k=10)`` one query after another for ``seconds``: how many, searches/s, p50 / p99 in ms."""
    times = []
    started = time.perf_counter()
    while time.perf_counter() - started < seconds:
        t0 = time.perf_counter()
        coll.search([queries[len(times) % len(queries)]], k=10)
        times.append(time.perf_counter() - t0)
    elapsed = time.perf_counter() - started
    return {"searches": len(times), "per_s": round(len(times) / elapsed, 1), **latency_ms(times)}


def in_process(copy: Path, searches: list[str], seconds: float) -> dict:
    """``Collection.search([q], k=10)`` one query at a time on one thread, here, on ``copy``: searches/s and latency."""
    try:
        from dupq.collection.collection import Collection
    except ImportError:  # a tree from before the package had subpackages (a baseline run)
        try:
            from dupq.collection import Collection
        except ImportError:  # a tree from before dupq.search became dupq.collection (c1cb340)
            from dupq.search.collection import Collection

    one_thread()
    with Collection.open(copy) as coll:
        for q in searches[:50]:  # warm-up
            coll.search([q], k=10)
        return timed_searches(coll, searches[50:], seconds)


def health(port: int) -> dict | None:
    """What the server's ``/health`` answers; None while it does not answer 200."""
    status, answer = ask(f"http://{HOST}:{port}/health", method="GET")
    return answer if status == 200 else None


def built(args: SimpleNamespace) -> Path:
    """``--collection``, or the collection of every Quora question in ``--work`` (built with `dupq index build` if missing)."""
    args.work.mkdir(parents=True, exist_ok=True)
    if args.collection is not None:
        return args.collection
    source = args.work / f"quora-{args.index}-{args.model.name if args.model else 'bundled'}"
    if not source.exists():  # its output stays out of the one JSON line this script prints
        command = ["index", "build", str(args.data), "--out", str(source), "--index", args.index]
        model = ["--model", str(args.model)] if args.model else []
        child([sys.executable, "-m", "dupq.cli", *command, *model], "dupq index build", env=code_env(args))
    return source


def working_copy(args: SimpleNamespace) -> Path:
    """A fresh copy of :func:`built`'s collection in ``--work``: the load test changes it."""
    source = built(args)
    copy = args.work / "load-copy"
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(source, copy)
    return copy


def load_phases(server, port: int, token: str, args: SimpleNamespace, searches: list[str], rng, tag: str) -> dict:
    """A warm-up, then the search-only and the mixed phase: ``{"search_only": ..., "mixed": ...}``, each with
    the CPU seconds the server's processes and this load generator spent per request (less load-bound than rates)."""
    asyncio.run(run_phase(port, token, args.clients, args.warmup, args.max_requests, searches, 0.0, rng, tag))
    phases = {}
    for name, add_share in (("search_only", 0.0), ("mixed", args.add_share)):
        server_cpu, client_cpu = group_cpu_s(server.pid), time.process_time()
        phase = asyncio.run(
            run_phase(port, token, args.clients, args.seconds, args.max_requests, searches, add_share, rng, tag)
        )
        requests = phase["search"]["requests"] + phase.get("add", {}).get("requests", 0)
        if server_cpu is not None and requests:
            phase["server_cpu_ms_per_request"] = round(1000 * (group_cpu_s(server.pid) - server_cpu) / requests, 3)
            phase["client_cpu_ms_per_request"] = round(1000 * (time.process_time() - client_cpu) / requests, 3)
        phases[name] = phase
    return phases


def group_cpu_s(pgid: int) -> float | None:
    """User + system CPU seconds of every live process in process group ``pgid`` (Linux's /proc; None elsewhere)."""
    if not Path("/proc/self/stat").exists():
        return None
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()  # after the command name, which may hold spaces
        except OSError:  # the process has exited
            continue
        if int(fields[2]) == pgid:  # fields: state, ppid, pgrp, ..., utime (11), stime (12)
            total += int(fields[11]) + int(fields[12])
    return total / ticks


def kill9_phase(server, copy: Path, port: int, token: str, log, args: SimpleNamespace, searches: list[str], rng, tag):
    """Adds until ``server`` is killed, a restart, and the check of every acknowledged add: ``(restarted server, result)``."""
    before = health(port)["questions"]
    acked, broken, failed = asyncio.run(
        adds_until_killed(port, token, args.clients, args.kill_after, server, searches, rng, tag)
    )
    server.wait(timeout=30)
    server, restart_s = start_server(copy, port, token, log, args)
    try:
        after = health(port)["questions"]
        check = asyncio.run(verify(port, token, args.clients, acked))
    finally:  # main stops the server it knows, the killed one: this one is stopped here
        stop(server)
    check["not_found_by_search_but_stored"] = stored(copy, acked, check.pop("missing"))
    check["lost"] -= len(check["not_found_by_search_but_stored"])
    return server, {
        "acked_adds": len(acked),
        "unacknowledged_in_flight": broken,
        "refused": failed,
        "count_before": before,
        "count_after_restart": after,
        "count_grew_by_at_least_acked": after - before >= len(acked),
        "restart_s": round(restart_s, 2),
        **check,
    }


def stop(server) -> None:
    """SIGTERM to the server (its supervisor stops the workers); SIGKILL to its process group after a minute."""
    if server.poll() is None:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()


def target_met(result: dict) -> bool:
    """1,000 searches/s with p99 under 50 ms, the mixed phase's p99 under 100 ms, no errors in any phase, and
    no acknowledged add lost to kill -9."""
    s, mixed = result["search_only"]["search"], result["mixed"]
    return (
        s["per_s"] >= 1000
        and s["p99_ms"] < 50
        and s["errors"] == 0
        and max(mixed["search"]["p99_ms"], mixed.get("add", {}).get("p99_ms", 0)) < 100
        and mixed["search"]["errors"] == 0
        and mixed.get("add", {}).get("errors", 0) == 0
        and result["kill9"]["lost"] == 0
        and result["kill9"]["count_grew_by_at_least_acked"]
    )


def main(
    collection: CollectionFolder = None,
    model: ModelFolder = None,
    data: Data = DATA,
    index: Index = "hnsw",
    work: Work = WORK,
    workers: Annotated[Optional[int], typer.Option(help="dupq serve --workers N (default: the server's own).")] = None,
    single_seconds: Annotated[float, typer.Option(help="Length of the in-process single-search run.")] = 10.0,
    clients: Annotated[int, typer.Option(min=1, help="Concurrent HTTP clients.")] = 16,
    seconds: Seconds = 20.0,
    warmup: Annotated[float, typer.Option(help="Seconds of load before the timed phases.")] = 3.0,
    max_requests: Annotated[int, typer.Option(help="Cap on requests per phase.")] = 100_000,
    add_share: Annotated[float, typer.Option(help="Share of adds in the mixed phase.")] = 0.1,
    kill_after: Annotated[float, typer.Option(help="Seconds of adds before kill -9.")] = 3.0,
    start_timeout: Annotated[float, typer.Option(help="Seconds dupq serve may take to answer.")] = 300.0,
    seed: Seed = 0,
    code: Annotated[
        Optional[Path], typer.Option(help="Source folder of the dupq to measure (first on the module path).")
    ] = None,
    child_of: Annotated[Optional[tuple[Path, Path]], typer.Option("--in-process", hidden=True)] = None,
) -> None:
    args = SimpleNamespace(**locals())  # the options, as the helpers below take them
    if child_of:  # the child of in_process_child
        copy, queries = child_of
        print(json.dumps(in_process(copy, json.loads(queries.read_text()), args.single_seconds)))
        return
    copy = working_copy(args)
    from dupq.data.questions import read_questions

    rng = random.Random(args.seed)
    searches = rng.sample(read_questions(args.data).texts, 20_000)
    tag = f"bench-{secrets.token_hex(3)}"
    token = secrets.token_urlsafe(16)
    port = free_port()
    log = open(args.work / "server.log", "w")
    load = round(os.getloadavg()[0], 2)
    result: dict = {
        "code": str(args.code or Path(__import__("dupq").__file__).parents[1]),
        "workers": args.workers,
        "clients": args.clients,
        "model": str(args.model or "bundled"),
        "machine": {"cpus": os.cpu_count(), "arch": platform.machine(), "load_average_1m_at_start": load},
    }
    result["in_process"] = in_process_child(copy, searches, args.single_seconds, args)
    alone = result["in_process"]["per_s"]
    server, start_s = start_server(copy, port, token, log, args)
    result["start_s"] = round(start_s, 2)
    try:
        result["questions"] = health(port)["questions"]
        result.update(load_phases(server, port, token, args, searches, rng, tag))
        for phase in ("search_only", "mixed"):
            result[phase]["ratio_to_in_process"] = round(result[phase]["search"]["per_s"] / alone, 2)
        server, result["kill9"] = kill9_phase(server, copy, port, token, log, args, searches, rng, tag + "-kill")
    finally:
        stop(server)
        log.close()
        shutil.rmtree(copy, ignore_errors=True)
    result["target_met"] = target_met(result)
    print(json.dumps(result))
