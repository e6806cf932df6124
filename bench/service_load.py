"""Load and fault test of ``dupq serve`` on loopback: throughput, latency, and ``kill -9`` during adds.

1. Takes a collection of the Quora questions (``--collection``), or builds one with
   ``dupq index build DATA --index hnsw`` (all 537,617 distinct questions with words, by qid), and works
   on a copy of it, so the original is never changed.
2. Starts ``dupq serve COPY --port P`` on 127.0.0.1 as a subprocess with a random token.
3. ``--clients`` concurrent clients (16), each with its own keep-alive connection, for
   ``--seconds`` per phase: *search* (searches only: the target), then *mixed* (searches and,
   with probability ``--add-share``, adds). Each phase reports requests/s, p50/p99 latency and
   errors (anything but a 2xx, or a broken connection).
4. *kill -9*: the clients only add; after ``--kill-after`` seconds the server gets SIGKILL. The
   server is restarted on the same folder, and every add that got a 2xx answer is looked up: a
   search for its text must return its id and text, and where the approximate (HNSW) search
   misses it, its row must be in the collection's SQLite file once the server has stopped; the
   count must have grown by at least the acknowledged adds.

Prints one JSON line. Bounded: every phase stops after its seconds or ``--max-requests``, the
server start waits at most ``--start-timeout`` s, and the server is always stopped at the end.

The client is a minimal HTTP/1.1 client on asyncio streams rather than httpx: load generator
and server share the machine's 2 cores, and httpx costs several times more CPU per request.

    python bench/service_load.py --index hnsw --seconds 20      # builds with the bundled model
    python bench/service_load.py --collection runs/bench-service/quora-hnsw-bundled
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("DUPQ_DATA", REPO.parent / "shared" / "data" / "quora_duplicate_questions.tsv.gz"))
HOST = "127.0.0.1"


class Connection:
    """One keep-alive HTTP/1.1 connection that sends JSON and reads a Content-Length response."""

    def __init__(self, port: int, token: str):
        self.port, self.token = port, token
        self.reader = self.writer = None

    async def request(self, method: str, path: str, body=None, auth: bool = False) -> tuple[int, bytes]:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(HOST, self.port)
        data = json.dumps(body).encode() if body is not None else b""
        head = f"{method} {path} HTTP/1.1\r\nHost: {HOST}\r\nContent-Type: application/json\r\nContent-Length: {len(data)}\r\n"
        if auth:
            head += f"Authorization: Bearer {self.token}\r\n"
        try:
            self.writer.write(head.encode() + b"\r\n" + data)
            status_line = await self.reader.readline()
            if not status_line:
                raise ConnectionError("the server closed the connection")
            status, length, close = int(status_line.split()[1]), 0, False
            while (line := await self.reader.readline()) not in (b"\r\n", b""):
                name, _, value = line.partition(b":")
                name = name.strip().lower()
                if name == b"content-length":
                    length = int(value)
                elif name == b"connection" and value.strip().lower() == b"close":
                    close = True
            payload = await self.reader.readexactly(length)
        except BaseException:
            self.close()
            raise
        if close:
            self.close()
        return status, payload

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None


def percentile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return float("nan")
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


def summary(latencies: list[float], seconds: float, errors: int) -> dict:
    s = sorted(latencies)
    return {
        "requests": len(s),
        "per_s": round(len(s) / seconds, 1),
        "p50_ms": round(1000 * percentile(s, 0.50), 2),
        "p99_ms": round(1000 * percentile(s, 0.99), 2),
        "errors": errors,
    }


async def run_phase(port, token, clients, seconds, max_requests, searches, add_share, rng, tag) -> dict:
    """Clients searching (and adding with probability ``add_share``) until time or count runs out."""
    lat = {"search": [], "add": []}
    errors = {"search": 0, "add": 0}
    samples: list[str] = []
    deadline = time.perf_counter() + seconds
    budget = [max_requests]

    async def client(c: int) -> None:
        conn = Connection(port, token)
        n = 0
        while time.perf_counter() < deadline and budget[0] > 0:
            budget[0] -= 1
            kind = "add" if rng.random() < add_share else "search"
            if kind == "add":
                n += 1
                req = (
                    "POST",
                    "/questions",
                    {"text": f"{rng.choice(searches)} ({tag} {c} {n})", "metadata": {"bench": tag}},
                    True,
                )
            else:
                req = ("POST", "/search", {"question": rng.choice(searches), "k": 10}, False)
            started = time.perf_counter()
            try:
                status, payload = await conn.request(*req)
                ok = 200 <= status < 300
                if not ok and len(samples) < 5:
                    samples.append(f"{status} {payload[:200]!r}")
            except (OSError, ValueError, asyncio.IncompleteReadError) as e:
                ok = False
                if len(samples) < 5:
                    samples.append(repr(e))
            if ok:
                lat[kind].append(time.perf_counter() - started)
            else:
                errors[kind] += 1
        conn.close()

    started = time.perf_counter()
    await asyncio.gather(*(client(c) for c in range(clients)))
    elapsed = time.perf_counter() - started
    out = {"seconds": round(elapsed, 2), "search": summary(lat["search"], elapsed, errors["search"])}
    if add_share:
        out["add"] = summary(lat["add"], elapsed, errors["add"])
    out["all_per_s"] = round((len(lat["search"]) + len(lat["add"])) / elapsed, 1)
    if samples:
        out["error_samples"] = samples
    return out


async def adds_until_killed(port, token, clients, kill_after, server, searches, rng, tag) -> tuple[list, int, int]:
    """Clients add questions; the server is SIGKILLed after ``kill_after`` s. Returns the acknowledged adds."""
    acked: list[tuple[int, str]] = []
    broken = [0]
    failed = [0]
    killed = asyncio.Event()

    async def client(c: int) -> None:
        conn = Connection(port, token)
        n = 0
        while not killed.is_set():
            n += 1
            text = f"{rng.choice(searches)} ({tag} {c} {n})"
            try:
                status, payload = await conn.request(
                    "POST", "/questions", {"text": text, "metadata": {"bench": tag}}, auth=True
                )
            except (OSError, ValueError, asyncio.IncompleteReadError):
                broken[0] += 1  # in flight when the server died: not acknowledged
                return
            if 200 <= status < 300:
                acked.append((json.loads(payload)["id"], text))
            else:
                failed[0] += 1

    async def killer() -> None:
        await asyncio.sleep(kill_after)
        os.kill(server.pid, signal.SIGKILL)
        killed.set()

    await asyncio.gather(killer(), *(client(c) for c in range(clients)))
    return acked, broken[0], failed[0]


async def verify(port, token, clients, acked) -> dict:
    """Search each acknowledged text; its id and text must come back."""
    missing: list[int] = []  # ids a search for their text did not return
    queue = list(acked)

    async def client() -> None:
        conn = Connection(port, token)
        while queue:
            new_id, text = queue.pop()
            status, payload = await conn.request("POST", "/search", {"question": text, "k": 100})
            hits = json.loads(payload)["results"] if status == 200 else []
            if not any(h["id"] == new_id and h["text"] == text for h in hits):
                missing.append(new_id)
        conn.close()

    await asyncio.gather(*(client() for _ in range(clients)))
    return {"checked": len(acked), "missing": sorted(missing), "lost": len(missing)}


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


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def start_server(collection: Path, model: Path | None, port: int, token: str, log, timeout: float):
    command = [sys.executable, "-m", "dupq.cli", "serve", str(collection), "--host", HOST, "--port", str(port)]
    if model:
        command += ["--model", str(model)]
    started = time.perf_counter()
    server = subprocess.Popen(
        command, env={**os.environ, "DUPQ_API_TOKEN": token}, stdout=log, stderr=subprocess.STDOUT
    )
    while time.perf_counter() - started < timeout:
        if server.poll() is not None:
            raise SystemExit(f"dupq serve exited with status {server.returncode}; see {log.name}")
        try:
            with socket.create_connection((HOST, port), timeout=1) as s:
                s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                if s.recv(64).startswith(b"HTTP/1.1 200"):
                    return server, time.perf_counter() - started
        except OSError:
            pass
        time.sleep(0.2)
    server.kill()
    raise SystemExit(f"dupq serve did not answer /health within {timeout:.0f} s; see {log.name}")


def health(port: int) -> dict:
    with socket.create_connection((HOST, port), timeout=10) as s:
        s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    return json.loads(data.split(b"\r\n\r\n", 1)[1])


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--collection", type=Path, help="collection to load-test (a copy is used); default: build one")
    p.add_argument("--model", type=Path, help="model folder (for building; default: the bundled model)")
    p.add_argument("--data", type=Path, default=DATA, help="Quora pairs file (for building)")
    p.add_argument("--index", default="hnsw", choices=["flat", "hnsw"], help="index kind (for building)")
    p.add_argument("--work", type=Path, default=REPO / "runs" / "bench-service", help="folder for the copy and logs")
    p.add_argument("--clients", type=int, default=16)
    p.add_argument("--seconds", type=float, default=20.0, help="length of each load phase")
    p.add_argument("--warmup", type=float, default=3.0)
    p.add_argument("--max-requests", type=int, default=100_000, help="cap on requests per phase")
    p.add_argument("--add-share", type=float, default=0.1, help="share of adds in the mixed phase")
    p.add_argument("--kill-after", type=float, default=3.0, help="seconds of adds before kill -9")
    p.add_argument("--start-timeout", type=float, default=300.0)
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args()


def working_copy(args: argparse.Namespace) -> Path:
    """A fresh copy of ``--collection`` (built first with `dupq index build` when none is given) in ``--work``."""
    args.work.mkdir(parents=True, exist_ok=True)
    source = args.collection
    if source is None:
        source = args.work / f"quora-{args.index}-{args.model.name if args.model else 'bundled'}"
        if not source.exists():  # its output stays out of the one JSON line this script prints
            built = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "dupq.cli",
                    "index",
                    "build",
                    str(args.data),
                    "--out",
                    str(source),
                    "--index",
                    args.index,
                    *(["--model", str(args.model)] if args.model else []),
                ],
                capture_output=True,
                text=True,
            )
            if built.returncode != 0:
                raise SystemExit(f"dupq index build failed: {built.stderr.strip()[-500:]}")
    copy = args.work / "load-copy"
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(source, copy)
    return copy


def load_phases(
    port: int, token: str, args: argparse.Namespace, searches: list[str], rng: random.Random, tag: str
) -> dict:
    """A warm-up, then the search-only and the mixed phase: ``{"search_only": ..., "mixed": ...}``."""
    asyncio.run(run_phase(port, token, args.clients, args.warmup, args.max_requests, searches, 0.0, rng, tag))
    search_only = asyncio.run(
        run_phase(port, token, args.clients, args.seconds, args.max_requests, searches, 0.0, rng, tag)
    )
    mixed = asyncio.run(
        run_phase(port, token, args.clients, args.seconds, args.max_requests, searches, args.add_share, rng, tag)
    )
    return {"search_only": search_only, "mixed": mixed}


def kill9_phase(
    server,
    copy: Path,
    port: int,
    token: str,
    log,
    args: argparse.Namespace,
    searches: list[str],
    rng: random.Random,
    tag: str,
):
    """Adds until ``server`` is killed, a restart, and the check of every acknowledged add: ``(restarted server, result)``."""
    before = health(port)["questions"]
    acked, broken, failed = asyncio.run(
        adds_until_killed(port, token, args.clients, args.kill_after, server, searches, rng, tag)
    )
    server.wait(timeout=30)
    server, restart_s = start_server(copy, None, port, token, log, args.start_timeout)
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
    if server.poll() is None:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            server.kill()


def target_met(result: dict) -> bool:
    """300 searches/s with p99 under 100 ms, no errors in any phase, and no acknowledged add lost to kill -9."""
    s = result["search_only"]["search"]
    return (
        s["per_s"] >= 300
        and s["p99_ms"] < 100
        and s["errors"] == 0
        and result["mixed"]["search"]["errors"] == 0
        and result["mixed"].get("add", {}).get("errors", 0) == 0
        and result["kill9"]["lost"] == 0
        and result["kill9"]["count_grew_by_at_least_acked"]
    )


def main() -> None:
    args = parse_args()
    copy = working_copy(args)
    from dupq.data.questions import read_questions

    rng = random.Random(args.seed)
    searches = rng.sample(read_questions(args.data).texts, 20_000)
    tag = f"bench-{secrets.token_hex(3)}"
    token = secrets.token_urlsafe(16)
    port = free_port()
    log = open(args.work / "server.log", "w")
    result: dict = {
        "clients": args.clients,
        "model": str(args.model or "bundled"),
        "machine": {
            "cpus": os.cpu_count(),
            "arch": platform.machine(),
            "load_average_1m_at_start": round(os.getloadavg()[0], 2),
        },
    }
    server, result["start_s"] = start_server(copy, None, port, token, log, args.start_timeout)
    try:
        result["questions"] = health(port)["questions"]
        result.update(load_phases(port, token, args, searches, rng, tag))
        server, result["kill9"] = kill9_phase(server, copy, port, token, log, args, searches, rng, tag + "-kill")
    finally:
        stop(server)
        log.close()
        shutil.rmtree(copy, ignore_errors=True)
    result["target_met"] = target_met(result)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
