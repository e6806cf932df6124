"""What a reranker costs, side by side in one run: the build, a first search, a search with stored vectors, the service.

The task is :mod:`dupq.evaluation.tasks`' help-desk yardstick (``--split``; its corpus is every old question plus
Quora's dev questions, 20,282 on the dev half; ``--questions N`` keeps its first N for a quick run). Four figures:

1. **build**: ``dupq index build CORPUS --out DIR`` without a reranker and with ``--rerank MODEL`` (lazy: no
   reranker vector is encoded at the build), each timed on the wall clock as a user runs it (the process, the
   model loads, the encoding, the store), alternated ``--rounds`` times; the medians and their ratio.
2. **first search**: on the last lazily reranked build, single-query searches (one torch thread, as ``dupq search``
   runs) of ``--searches`` queries chosen so that no two share a candidate of the fast model's
   :func:`~dupq.collection.rerank.rerank_candidates` (K): each search encodes its K candidates with the reranker
   (``encoded_per_search`` says how many it did). p50 (wall, and this process's CPU: the figure a loaded machine
   bends least), and the ms each encoded candidate cost.
3. **stored search**: the same queries again, their candidates' vectors now stored; p50 and p99 over three passes.
4. **serve**: ``dupq serve`` on that collection with its default workers, ``--clients`` keep-alive HTTP clients
   (:mod:`dupq_lab.service.http_load`) sending those queries for ``--seconds``, reranked and with
   ``"rerank": false``, alternated ``--rounds`` times on the same server: searches/s, p50 and p99, the server's CPU ms
   per search (the machine's cores over it bound the rate, whatever else runs), and the ratio.

``targets`` compares each figure with the issue's: build within 2x, stored search p50 <= 30 ms, first search p50 <=
1.5 s, served reranked searches >= 100/s. The machine's load average is printed at the start and the end (on a
shared VM the absolute figures are upper bounds; the ratios, taken in one run, are what count).

    dupq-lab rerank-cost --rerank mpnet                       # the yardstick's 20,282 questions
    dupq-lab rerank-cost --rerank minilm --questions 2000 --seconds 5

Prints one JSON line.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import secrets
import shutil
import statistics
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Annotated, Literal, Optional

import numpy as np
import typer

from dupq.collection.rerank import rerank_candidates
from dupq.core.errors import DupqError
from dupq.modeling.model import Model
from dupq_lab.options import DATA, RUNS, Data, ModelFolder, Rounds, Seconds, clocked, one_sentence
from dupq_lab.options import child as run_child

TARGETS = {"build_ratio": 2.0, "stored_search_p50_ms": 30.0, "first_search_p50_ms": 1500.0, "serve_per_s": 100.0}
PASSES = 3  # passes over the queries for the stored-search latency
HITS = 10  # hits a search asks for, as the service's default


def built(corpus: Path, out: Path, model: Optional[Path], rerank: str | None) -> float:
    """``dupq index build`` of ``corpus`` into ``out`` (removed first), as a user runs it: its wall seconds."""
    shutil.rmtree(out, ignore_errors=True)
    command = [sys.executable, "-m", "dupq.cli", "index", "build", str(corpus), "--out", str(out)]
    command += ["--model", str(model)] if model else []
    command += ["--rerank", rerank] if rerank else []
    return clocked(run_child, command, "dupq index build", DupqError)[1]


def apart(coll, queries: list[str], wanted: int) -> list[str]:
    """Up to ``wanted`` of ``queries``, in order, no two of which share one of the fast model's candidates."""
    _, ids = coll.nearest(coll.model.encode(queries), rerank_candidates(coll.reranker))  # (Q, K)
    chosen, seen = [], set()
    for query, row in zip(queries, ids.tolist()):
        candidates = {i for i in row if i >= 0}
        if not candidates & seen:
            chosen.append(query)
            seen |= candidates
        if len(chosen) == wanted:
            break
    return chosen


def timed(coll, queries: list[str]) -> tuple[list[float], list[float], list[int]]:
    """Each query searched alone: its wall ms, its CPU ms (this process's: less bound to the machine's load), and how
    many questions the reranker encoded for it."""
    ms, cpu_ms, encoded = [], [], []
    for query in queries:
        before, started, cpu = coll.reranker_encoded, time.perf_counter(), time.process_time()
        coll.search([query], k=HITS)
        ms.append((time.perf_counter() - started) * 1000)
        cpu_ms.append((time.process_time() - cpu) * 1000)
        encoded.append(coll.reranker_encoded - before)
    return ms, cpu_ms, encoded


def searched(folder: Path, queries: list[str], wanted: int) -> dict:
    """The first searches of ``wanted`` of ``queries`` (:func:`apart`) on a lazily reranked collection, then the same
    searches with stored vectors."""
    from dupq.collection.collection import Collection
    from dupq_lab.service.service_load import one_thread

    one_thread()
    with Collection.open(folder) as coll:
        chosen = apart(coll, queries, wanted)
        first_ms, first_cpu, encoded = timed(coll, chosen)
        passes = [timed(coll, chosen) for _ in range(PASSES)]
    stored_ms, stored_cpu = ([t for run in passes for t in run[part]] for part in (0, 1))
    per_question = [t / n for t, n in zip(first_ms, encoded) if n]
    return {
        "chosen": chosen,
        "first_search": {
            "searches": len(first_ms),
            "p50_ms": round(float(np.median(first_ms)), 1),
            "cpu_p50_ms": round(float(np.median(first_cpu)), 1),
            "encoded_per_search_p50": float(np.median(encoded)),
            "ms_per_encoded_question": round(float(np.median(per_question)), 2) if per_question else None,
        },
        "stored_search": {
            "searches": len(stored_ms),
            "p50_ms": round(float(np.median(stored_ms)), 2),
            "p99_ms": round(float(np.percentile(stored_ms, 99)), 2),
            "cpu_p50_ms": round(float(np.median(stored_cpu)), 2),
            "encoded": sum(sum(run[2]) for run in passes),  # 0: every candidate's vector was stored
        },
    }


def served(folder: Path, queries: list[str], clients: int, seconds: float, rounds: int, work: Path) -> dict:
    """``dupq serve`` of ``folder`` (default workers) under ``clients`` HTTP clients, reranked and not, alternated."""
    from dupq_lab.service.http_load import run_phase
    from dupq_lab.service.service_load import free_port, group_cpu_s, start_server, stop

    args = SimpleNamespace(workers=None, start_timeout=300.0, code=None)
    port, token, rng = free_port(), secrets.token_urlsafe(16), random.Random(0)
    sides: dict[str, list[dict]] = {"reranked": [], "plain": []}
    with open(work / "server.log", "w") as log:
        server, _ = start_server(folder, port, token, log, args)
        try:
            asyncio.run(run_phase(port, token, clients, min(seconds, 3.0), 100_000, queries, 0.0, rng, "warm-up"))
            for _ in range(rounds):
                for side, extra in (("reranked", None), ("plain", {"rerank": False})):
                    phase = run_phase(port, token, clients, seconds, 100_000, queries, 0.0, rng, side, extra=extra)
                    cpu = group_cpu_s(server.pid)
                    result = asyncio.run(phase)["search"]
                    if cpu is not None and result["requests"]:  # the machine's cores over it bound the rate
                        result["cpu_ms"] = 1000 * (group_cpu_s(server.pid) - cpu) / result["requests"]
                    sides[side].append(result)
        finally:
            stop(server)
    out = {
        side: {key: statistics.median(r[key] for r in runs) for key in ("per_s", "p50_ms", "p99_ms")}
        | {"server_cpu_ms_per_search": median_of([r["cpu_ms"] for r in runs if "cpu_ms" in r])}
        | {"errors": sum(r["errors"] for r in runs)}
        for side, runs in sides.items()
    }
    out["per_s_ratio"] = round(out["reranked"]["per_s"] / out["plain"]["per_s"], 3)
    return out


def median_of(values: list[float]) -> float | None:
    """The median, rounded; None for no value (a system without /proc)."""
    return round(statistics.median(values), 2) if values else None


def measure(
    corpus: list[str],
    queries: list[str],
    model: Optional[Path],
    rerank: str,
    work: Path,
    *,
    searches: int = 20,
    clients: int = 16,
    seconds: float = 10.0,
    rounds: int = 1,
) -> dict:
    """The four figures of the module's text for a collection of ``corpus`` searched with ``queries``."""
    work.mkdir(parents=True, exist_ok=True)
    source = work / "corpus.jsonl"
    source.write_text("".join(json.dumps({"question": text}) + "\n" for text in corpus))
    load_at_start = os.getloadavg()[0]
    times: dict[str, list[float]] = {"plain": [], "reranked": []}
    for _ in range(rounds):  # alternated, so a change in the machine's load falls on both
        times["plain"].append(built(source, work / "plain", model, None))
        times["reranked"].append(built(source, work / "reranked", model, rerank))
    plain, reranked = statistics.median(times["plain"]), statistics.median(times["reranked"])
    build = {"plain_s": round(plain, 2), "rerank_s": round(reranked, 2), "ratio": round(reranked / plain, 3)}
    out = {"collection_questions": len(corpus), "model": str(model or "bundled"), "rerank": rerank}
    out |= {"k": rerank_candidates(Model.load(rerank)), "build": build}
    # a child process: one torch thread for the searches, as dupq search runs, and this one keeps its own
    into = work / "searched.json"
    spec = json.dumps({"folder": str(work / "reranked"), "queries": queries, "wanted": searches})
    command = [sys.executable, "-m", "dupq_lab", "rerank-cost", "--rerank", rerank]
    run_child([*command, "--searched", spec, "--into", into], "the timed searches", DupqError)
    found = json.loads(into.read_text())
    out["first_search"], out["stored_search"] = found["first_search"], found["stored_search"]
    out["serve"] = served(work / "reranked", found["chosen"], clients, seconds, rounds, work)
    out["targets"] = {
        "build_ratio": out["build"]["ratio"] <= TARGETS["build_ratio"],
        "stored_search_p50_ms": out["stored_search"]["p50_ms"] <= TARGETS["stored_search_p50_ms"],
        "first_search_p50_ms": out["first_search"]["p50_ms"] <= TARGETS["first_search_p50_ms"],
        "serve_per_s": out["serve"]["reranked"]["per_s"] >= TARGETS["serve_per_s"],
    }
    load = {"load_average_1m_at_start": round(load_at_start, 2), "load_average_1m_at_end": round(os.getloadavg()[0], 2)}
    out["machine"] = {"cpus": os.cpu_count(), **load}
    return out


@one_sentence
def main(
    rerank: Annotated[str, typer.Option(metavar="MODEL", help="The reranker: minilm, mpnet or a model folder.")],
    model: ModelFolder = None,
    split: Annotated[Literal["dev", "test"], typer.Option(help="The yardstick's half.")] = "dev",
    data: Data = DATA,
    questions: Annotated[
        Optional[int], typer.Option(min=1, help="Keep the corpus's first N questions (a quick run).")
    ] = None,
    searches: Annotated[int, typer.Option(min=1, help="Queries timed (first searches, then stored).")] = 20,
    clients: Annotated[int, typer.Option(min=1, help="Concurrent HTTP clients of dupq serve.")] = 16,
    seconds: Seconds = 10.0,
    rounds: Rounds = 1,
    work: Annotated[Path, typer.Option(help="Where the collections are built (replaced on each run).")] = RUNS
    / "rerank-cost",
    child: Annotated[Optional[str], typer.Option("--searched", hidden=True)] = None,
    into: Annotated[Optional[Path], typer.Option(hidden=True)] = None,
) -> None:
    if child:  # measure's child process, which times the searches on one thread
        spec = json.loads(child)
        into.write_text(json.dumps(searched(Path(spec["folder"]), spec["queries"], spec["wanted"])))
        return
    from dupq.evaluation.tasks import shipped_help_desk_task

    task, made_of = shipped_help_desk_task(data, split)
    corpus = task.corpus[:questions] if questions else task.corpus
    sizes = {"searches": searches, "clients": clients, "seconds": seconds, "rounds": rounds}
    out = measure(corpus, task.queries, model, rerank, work, **sizes)
    command = f"dupq-lab rerank-cost --rerank {rerank} --split {split} --seconds {seconds:g} --rounds {rounds}"
    command += f" --questions {questions}" if questions else ""
    print(json.dumps({"command": command, **made_of, **out}))
