"""The load generator of dupq-lab service-load: keep-alive HTTP/1.1 clients on asyncio streams.

A minimal client rather than httpx: load generator and server share the machine's cores, and
httpx costs several times more CPU per request. Phases run ``clients`` concurrent clients, each
with its own connection: searching (and adding), adding until the server is killed, and looking
up every acknowledged add.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time

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
    tails = {f"p{q}_ms": round(1000 * percentile(s, q / 100), 2) for q in (50, 99)}
    return {"requests": len(s), "per_s": round(len(s) / seconds, 1), **tails, "errors": errors}


async def run_phase(port, token, clients, seconds, max_requests, searches, add_share, rng, tag, extra=None) -> dict:
    """Clients searching (and adding with probability ``add_share``) until time or count runs out; ``extra``: more
    fields of each search's body (``{"rerank": False}``)."""
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
                body = {"text": f"{rng.choice(searches)} ({tag} {c} {n})", "metadata": {"bench": tag}}
                req = ("POST", "/questions", body, True)
            else:
                req = ("POST", "/search", {"question": rng.choice(searches), "k": 10, **(extra or {})}, False)
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
    """Clients add questions; the server (its whole process group: the supervisor and every worker) is
    SIGKILLed after ``kill_after`` s. Returns the acknowledged adds."""
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
                body = {"text": text, "metadata": {"bench": tag}}
                status, payload = await conn.request("POST", "/questions", body, auth=True)
            except (OSError, ValueError, asyncio.IncompleteReadError):
                broken[0] += 1  # in flight when the server died: not acknowledged
                return
            if 200 <= status < 300:
                acked.append((json.loads(payload)["id"], text))
            else:
                failed[0] += 1

    async def killer() -> None:
        await asyncio.sleep(kill_after)
        os.killpg(server.pid, signal.SIGKILL)  # the server runs in its own session: pgid == pid
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
