"""`dupq dedup` at scale, beside SemHash on the same vectors: time, peak memory and the groups' quality (JSON).

    dupq-lab dedup-scale speed   [--sizes 50000 100000 200000]   (then dupq alone on all of them)
    dupq-lab dedup-scale quality [--cosines 0.7 0.75 0.8 0.85]
    dupq-lab dedup-scale quality --rerank minilm   (the labelled rows' questions, with and without the reranker)
    dupq-lab dedup-scale scale   [--sizes 50000 500000 5000000]
    dupq-lab dedup-scale ray     [--sizes 50000 10000]   (--exact-below values; 20,000 questions)
    dupq-lab dedup-scale beams   [--sizes 1 2 3 4 16]   (the probes' HNSW beam, times nprobe; 5M questions)
    dupq-lab dedup-scale star    [--sizes 10000 50000]  (every question a duplicate of one)

Every distinct question of the Quora file (one a line, as a user would hand them over) is encoded
once by the bundled model into a cache (``runs/dedup_scale``). Each timed run is a fresh process
(its peak memory is the process's ``ru_maxrss``):

* **speed**: ``dupq dedup FILE --out groups.csv`` end to end (read, encode, search, judge, group,
  write); then the grouping alone on the cached vectors by cosine at one threshold, dupq's star groups
  (``DedupConfig(on="similarity")``) beside SemHash's ``self_deduplicate`` (``SemHash.from_embeddings``,
  its default usearch index), in turn.
* **quality**: on all questions, the groups' pairwise precision, recall and F1 over the Quora file's
  labelled pairs of the bundled model's dev rows and test rows (both questions are in the input; a
  pair is predicted duplicate when both land in one group). The cosine threshold is chosen on the dev
  rows by the star groups' F1; then star, connected components and SemHash's rule (on dupq's edges)
  and SemHash itself, all at that threshold, and dupq's default (the model's probability at its own
  threshold), with each grouping's largest group and the duplicate pairs its groups imply.
  With ``--rerank MODEL``: the input is the distinct questions of the first :data:`RERANK_ROWS` of
  those dev rows and of those test rows alone (a transformer encodes half a million questions in hours
  on two cores), grouped as ``dupq dedup`` groups
  them (star, each model's own verdict at its own threshold), by the bundled model alone and with the
  reranker judging the bundled model's candidates (``dupq dedup --rerank MODEL``), side by side.
* **ray**: 20,000 questions on one machine and on a local Ray cluster (127.0.0.1), exact and partitioned:
  the share of either run's same-group pairs that are same-group pairs of the other.
* **scale**: synthetic archives made of the real vectors, grouped as ``dupq dedup`` groups (the model's
  verdict), to show the cost per question stays flat. An archive of ``n`` questions is cut into blocks
  of at most all the real questions, each block the real vectors (no question twice) turned by a random
  rotation of its own: a rotation keeps every cosine within a block, so each block is as dense in
  duplicates as the real archive, and questions of two blocks are as unrelated as random directions.
  (Drawing ``n`` vectors around the real ones instead gives each real question ``n / 537,016`` near
  copies, so duplicates grow with the archive and the cost with them.)
* **star**: the worst case for the grouping, an archive where every question is a duplicate of one
  (the same question, asked ``n`` times): ``dupq dedup`` end to end, its time per question, which
  should stay flat as ``n`` grows (one group of ``n``; a hostile tester timed 3 minutes for 50,000).
* **beams**: on the 5M-question synthetic archive (past 4,096 lists, where the probes search an HNSW
  graph of the centroids), each beam's CPU time a question and the share of the neighbours above the
  cosine threshold, found through exact probes for a sample of questions, that its probes find too.
"""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Annotated, Literal, Optional

import numpy as np
import typer

from dupq_lab.launch import ENV, local_cluster, same_group_pairs
from dupq_lab.options import child as run_child
from dupq_lab.options import clocked, integers

CACHE = Path("runs/dedup_scale")
COSINE = 0.8  # the speed run's cosine threshold (the quality run chooses its own on dev)
RERANK_ROWS = 5_000  # quality --rerank: the labelled rows of each half whose questions are grouped


def questions() -> tuple[Path, np.ndarray]:
    """Every distinct Quora question, one a line, and its bundled-model vector (cached)."""
    from dupq.data.pairs import default_data_path
    from dupq.data.questions import read_questions
    from dupq.modeling.model import Model

    CACHE.mkdir(parents=True, exist_ok=True)
    text, vectors = CACHE / "questions.txt", CACHE / "vectors.npy"
    if not vectors.is_file():
        seen = dict.fromkeys(" ".join(q.split()) for q in read_questions(default_data_path()).texts)
        texts = [q for q in seen if q]
        text.write_text("".join(q + "\n" for q in texts))
        np.save(vectors, Model.load().encode(texts))
    return text, np.load(vectors, mmap_mode="r")


def first(n: int) -> Path:
    text, _ = questions()
    path = CACHE / f"first-{n}.txt"
    if not path.is_file():
        with open(text) as f, open(path, "w") as out:
            out.writelines(line for _, line in zip(range(n), f))
    return path


def timed(command: list) -> dict:
    """Wall time and peak memory (GNU time's maximum resident set) of one process; its last stdout line, if
    JSON, is merged in."""
    proc = run_child(["/usr/bin/time", "-f", "%e %U %S %M", *command], " ".join(map(str, command)))
    seconds, user, system, kilobytes = proc.stderr.strip().splitlines()[-1].split()
    row = {"seconds": float(seconds), "cpu_seconds": round(float(user) + float(system), 1)}
    row["peak_gb"] = round(int(kilobytes) / 1e6, 3)
    lines = proc.stdout.strip().splitlines()
    if lines and lines[-1].startswith("{"):
        row.update(json.loads(lines[-1]))
    return row


def rotated_blocks(real: np.ndarray, n: int, seed: int = 0) -> np.ndarray:
    """``n`` synthetic unit vectors: blocks of the real ones, each block without repeats and turned by its
    own random rotation (Haar: the QR of a Gaussian matrix, signs fixed), so duplicates stay as dense as
    in the real archive however large ``n`` grows."""
    rng = np.random.default_rng(seed)
    d = real.shape[1]
    vectors = np.empty((n, d), np.float32)
    for lo in range(0, n, len(real)):
        hi = min(n, lo + len(real))
        rows = np.sort(rng.choice(len(real), hi - lo, replace=False))
        q, r = np.linalg.qr(rng.normal(size=(d, d)))
        turn = (q * np.sign(np.diag(r))).astype(np.float32)
        for a in range(lo, hi, 1 << 18):
            b = min(hi, a + (1 << 18))
            vectors[a:b] = real[rows[a - lo : b - lo]] @ turn
    return vectors


def child(kind: str, n: int, threshold: float, synthetic: bool = False, save: str = "") -> None:
    """One timed grouping in this process: prints {"group_seconds": ..., "groups": ...} as its last line."""
    _, real = questions()
    vectors = rotated_blocks(real, n) if synthetic else np.ascontiguousarray(real[: n or len(real)], dtype=np.float32)
    start, cpu = time.perf_counter(), time.process_time()
    if kind.startswith("dupq"):
        from dupq.dedup.grouping import DedupConfig, dedup_vectors
        from dupq.modeling.model import Model

        model = Model.load()
        config = DedupConfig(threshold=threshold, on="similarity") if kind == "dupq" else DedupConfig()
        labels = dedup_vectors(vectors, model, config).label  # dupq-model: the model's verdict, as dupq dedup
    else:
        from semhash import SemHash

        records = [str(i) for i in range(len(vectors))]
        result = SemHash.from_embeddings(vectors, records, model=None).self_deduplicate(threshold=threshold)
        labels = np.full(len(vectors), -1, dtype=np.int64)
        for d in result.filtered:  # each removed record names the kept one it duplicates
            labels[int(d.record)] = labels[int(d.duplicate_of)] = int(d.duplicate_of)
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    if save:
        np.save(save, labels)
    grouped = int((labels >= 0).sum())
    print(json.dumps({"group_seconds": round(seconds, 1), "group_cpu_seconds": round(cpu, 1), "grouped": grouped}))


def me(*args) -> list[str]:
    return [sys.executable, "-m", "dupq_lab.speed.dedup_scale", "child", *map(str, args)]


def speed(sizes: list[int]) -> dict:
    """Side by side at each size; then ``dupq dedup`` alone on every question, end to end."""
    dupq = Path(sys.executable).with_name("dupq")
    everything = len(questions()[1])

    def end_to_end(n):
        return timed([dupq, "dedup", first(n), "--out", CACHE / "groups.csv", "--no-progress"])

    rows = []
    for n in sizes:
        row = {"questions": n, "dupq dedup FILE --out groups.csv": end_to_end(n)}
        row["dupq grouping (cosine)"] = timed(me("dupq", n, COSINE))
        row["SemHash self_deduplicate (cosine)"] = timed(me("semhash", n, COSINE))
        rows.append(row)
        print(json.dumps(row), file=sys.stderr, flush=True)
    return {"cosine": COSINE, "runs": rows, "all": {"questions": everything, **end_to_end(everything)}}


def labelled(pairs, where: dict[str, int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The labelled ``pairs`` whose two questions are both in the input (``where``: text -> row): rows a, b, labels."""
    a = np.array([where.get(" ".join(q.split()), -1) for q in pairs.q1])
    b = np.array([where.get(" ".join(q.split()), -1) for q in pairs.q2])
    keep = (a >= 0) & (b >= 0) & (a != b)
    return a[keep], b[keep], pairs.labels[keep]


def group_sizes(labels: np.ndarray) -> dict:
    """How many groups ``labels`` (-1: in none) make, the largest, and the duplicate pairs they imply."""
    sizes = np.bincount(labels[labels >= 0]) if (labels >= 0).any() else np.zeros(1, int)
    sizes = sizes[sizes > 0]
    implied = int((sizes * (sizes - 1) // 2).sum())
    return {"groups": int(len(sizes)), "largest": int(sizes.max()), "implied_pairs": implied}


def quality(cosines: list[float]) -> dict:
    from dupq.data.pairs import default_data_path, held_out
    from dupq.dedup.candidates import neighbour_blocks
    from dupq.dedup.clusters import CLUSTERERS, Edges
    from dupq.dedup.grouping import DedupConfig, judge
    from dupq.evaluation.grouping import pairwise
    from dupq.modeling.model import Model

    text, vectors = questions()
    vectors = np.ascontiguousarray(vectors, dtype=np.float32)
    where = {q.rstrip("\n"): i for i, q in enumerate(open(text))}
    model = Model.load()
    splits = held_out(model.metrics, default_data_path())

    dev, test = labelled(splits.dev, where), labelled(splits.test, where)
    low = min(cosines)
    by_cosine, by_model = [], []
    for rows, scores, ids in neighbour_blocks(vectors, DedupConfig().candidates):
        by_cosine.append(judge(model, vectors, rows, scores, ids, low, on="similarity"))
        by_model.append(judge(model, vectors, rows, scores, ids, model.threshold))
    by_cosine, by_model = Edges.join(by_cosine), Edges.join(by_model)
    n = len(vectors)

    def above(t):
        keep = by_cosine.score > t
        return Edges(by_cosine.a[keep], by_cosine.b[keep], by_cosine.score[keep])

    sweep = {t: pairwise(CLUSTERERS["star"](above(t), n).label, *dev) for t in cosines}
    chosen = max(cosines, key=lambda t: sweep[t]["f1"])
    groupings = {f"dupq {m} (cosine > {chosen})": CLUSTERERS[m](above(chosen), n).label for m in CLUSTERERS}
    verdict = f"dupq star, the model's verdict (probability > {model.threshold:.2f})"
    groupings[verdict] = CLUSTERERS["star"](by_model, n).label
    saved = CACHE / "semhash-labels.npy"
    timed(me("semhash", 0, chosen, 0, saved))
    groupings[f"SemHash self_deduplicate (cosine > {chosen})"] = np.load(saved)
    table = {
        name: {"dev": pairwise(labels, *dev), "test": pairwise(labels, *test), **group_sizes(labels)}
        for name, labels in groupings.items()
    }
    f1 = {str(t): sweep[t]["f1"] for t in cosines}
    return {"questions": n, "dev_sweep_star_f1": f1, "chosen_on_dev": chosen, "groupings": table}


def reranked_quality(rerank: str) -> dict:
    """The bundled model's groups beside the groups with ``rerank`` judging its candidates, on the questions of the
    bundled model's labelled dev and test rows; pairwise precision, recall and F1 on each half's labels."""
    from dupq.data.pairs import default_data_path, held_out
    from dupq.dedup.grouping import DedupConfig, dedup_vectors, same_text
    from dupq.evaluation.grouping import pairwise
    from dupq.modeling.model import Model
    from dupq_lab.vector_cache import DigestCache

    model, reranker = Model.load(), Model.load(rerank)
    splits = held_out(model.metrics, default_data_path())
    first = np.arange(RERANK_ROWS)
    halves = {"dev": splits.dev.take(first[: len(splits.dev)]), "test": splits.test.take(first[: len(splits.test)])}
    texts = list(dict.fromkeys(" ".join(q.split()) for p in halves.values() for q in [*p.q1, *p.q2]))
    texts = [t for t in texts if t]
    where = {t: i for i, t in enumerate(texts)}

    labels = {name: labelled(p, where) for name, p in halves.items()}
    vectors, model_s = clocked(model.encode, texts)  # (N, d)
    reranked, rerank_s = clocked(lambda: DigestCache(reranker, CACHE / f"rerank-{reranker.fingerprint()}")(texts))
    encode_s = {"model": round(model_s, 1), "rerank": round(rerank_s, 1)}  # the reranker's (N, d') each once
    same, config, table = same_text(texts), DedupConfig(), {}
    runs = {
        f"bundled model (its verdict, {model.threshold_on} > {model.threshold:.2f})": {},
        f"bundled model's candidates judged by {rerank} ({reranker.threshold_on} > {reranker.threshold:.2f})": {
            "reranker": reranker,
            "reranked": reranked,
        },
    }
    for name, extra in runs.items():
        clusters, seconds = clocked(dedup_vectors, vectors, model, config, same, **extra)
        table[name] = {
            **{half: pairwise(clusters.label, *labels[half]) for half in halves},
            **group_sizes(clusters.label),
            "group_seconds": round(seconds, 1),
        }
    return {
        "questions": len(texts),
        "rows_per_half": RERANK_ROWS,
        "rerank": rerank,
        "encode_seconds": encode_s,
        "groupings": table,
    }


def scale(sizes: list[int]) -> dict:
    rows = []
    for n in sizes:
        row = {"questions": n, **timed(me("dupq-model", n, COSINE, 1))}
        row["microseconds_per_question"] = round(row["group_seconds"] / n * 1e6, 1)
        row["cpu_microseconds_per_question"] = round(row["group_cpu_seconds"] / n * 1e6, 1)
        rows.append(row)
        print(json.dumps(row), file=sys.stderr, flush=True)
    return {
        "judged_by": "the bundled model's verdict",
        "archive": "the real vectors in randomly rotated blocks",
        "runs": rows,
    }


def star(sizes: list[int]) -> dict:
    """``dupq dedup`` on ``n`` copies of one question: one group of ``n``, end to end."""
    dupq, rows = Path(sys.executable).with_name("dupq"), []
    CACHE.mkdir(parents=True, exist_ok=True)
    for n in sizes:
        path = CACHE / f"star-{n}.txt"
        path.write_text("How do I learn Python?\n" * n)
        row = {"questions": n, **timed([dupq, "dedup", path, "--out", CACHE / "star.csv", "--no-progress"])}
        row["microseconds_per_question"] = round(row["seconds"] / n * 1e6, 1)
        rows.append(row)
        print(json.dumps(row), file=sys.stderr, flush=True)
    return {"archive": "one question asked n times (one group of n)", "runs": rows}


def beams(n: int, choices: list[int], sample: int = 20_000) -> dict:
    """Past FLAT_LISTS lists, the HNSW beam of the probes (efSearch = beam x nprobe) on the synthetic archive:
    its CPU time a question, and the share of a sample's neighbours above the cosine threshold that exact
    probes find which it finds too."""
    from dupq.dedup import candidates as c

    _, real = questions()
    vectors = rotated_blocks(real, n)
    config = c.CandidateConfig()
    k = config.neighbours + 1
    centroids = c.train_centroids(vectors, config)
    import faiss

    exact = faiss.IndexFlatIP(centroids.shape[1])
    exact.add(centroids)
    own = np.concatenate([exact.search(vectors[lo : lo + 65_536], 1)[1][:, 0] for lo in range(0, n, 65_536)])
    index = c.list_index(centroids, vectors, np.arange(n), own)
    rows = np.sort(np.random.default_rng(1).choice(n, sample, replace=False))
    queries = np.ascontiguousarray(vectors[rows])
    probed = exact.search(queries, config.nprobe)[1]
    probed[:, 0] = own[rows]
    ref_scores, ref_ids = c.search_lists(index, queries, probed, k)
    close = [set(i[(s > COSINE) & (i != r)].tolist()) for r, s, i in zip(rows, ref_scores, ref_ids)]
    rows_out = []
    for beam in choices:
        c.PROBE_BEAM = beam
        graph = c._flat_or_graph(centroids, config.nprobe)  # built outside the clock: once a run, not a question
        start = time.process_time()
        found = graph.search(queries, config.nprobe)[1]
        cpu = time.process_time() - start
        ids = c.search_lists(index, queries, found, k)[1]
        kept = sum(len(x & set(i.tolist())) for x, i in zip(close, ids))
        row = {
            "beam": beam,
            "efSearch": beam * config.nprobe,
            "cpu_microseconds_per_question": round(cpu / sample * 1e6, 1),
        }
        rows_out.append({**row, "close_neighbours_found": round(kept / max(1, sum(map(len, close))), 4)})
        print(json.dumps(rows_out[-1]), file=sys.stderr, flush=True)
    sizes = {"questions": n, "lists": len(centroids), "sample": sample, "cosine": COSINE}
    return {**sizes, "close_neighbours": sum(map(len, close)), "beams": rows_out}


def on_ray(n: int, exact_below: list[int]) -> dict:
    """A local Ray cluster on 127.0.0.1 against one machine: the share of each one's same-group pairs the other has."""
    bin_, rows = Path(sys.executable).parent, []
    with local_cluster() as address:
        for eb in exact_below:
            row = {"questions": n, "exact_below": eb}
            for name, extra in (("one machine", []), ("ray", ["--ray", address])):
                out = CACHE / f"ray-{name.replace(' ', '-')}.csv"
                cmd = [bin_ / "dupq", "dedup", first(n), "--out", out, "--exact-below", eb, "--no-progress", *extra]
                row[name] = run_child(cmd, f"dupq dedup ({name})", env=ENV).stdout.strip().splitlines()[-1]
            a, b = same_group_pairs(CACHE / "ray-one-machine.csv"), same_group_pairs(CACHE / "ray-ray.csv")
            row["same_group_pairs"] = {"one machine": len(a), "ray": len(b), "both": len(a & b)}
            row["share_of_one_machine_in_ray"] = round(len(a & b) / max(1, len(a)), 4)
            row["share_of_ray_in_one_machine"] = round(len(a & b) / max(1, len(b)), 4)
            rows.append(row)
    return {"runs": rows}


def main(
    what: Annotated[
        Literal["speed", "quality", "scale", "beams", "ray", "star", "child"],
        typer.Argument(help="The measurement (child: one timed grouping, which the others run)."),
    ],
    args: Annotated[Optional[list[str]], typer.Argument(hidden=True)] = None,
    sizes: Annotated[
        Optional[str],
        typer.Option(
            help='Comma-separated: questions (speed, star; speed "" runs the full set alone), --exact-below values '
            "(ray), beams."
        ),
    ] = None,
    cosines: Annotated[
        str, typer.Option(help="The cosine thresholds quality chooses among, comma-separated.")
    ] = "0.7,0.75,0.8,0.85,0.9",
    rerank: Annotated[
        Optional[str],
        typer.Option(
            metavar="MODEL",
            help="quality: group the labelled rows' questions with and without this reranker judging (minilm, mpnet, a folder).",
        ),
    ] = None,
) -> None:
    sizes = None if sizes is None else integers(sizes)
    if what == "child":
        kind, n, t, *rest = args
        child(kind, int(n), float(t), bool(int(rest[0])) if rest else False, rest[1] if len(rest) > 1 else "")
        return
    machine = {"machine": platform.processor() or platform.machine(), "cores": os.cpu_count()}
    runs = {  # each measurement with its default sizes
        "speed": lambda: speed([50_000, 100_000, 200_000] if sizes is None else sizes),  # "": the full set alone
        "quality": lambda: (
            quality([float(c) for c in cosines.split(",")]) if rerank is None else reranked_quality(rerank)
        ),
        "ray": lambda: on_ray(20_000, sizes or [50_000, 10_000]),
        "star": lambda: star(sizes or [10_000, 50_000]),
        "beams": lambda: beams(5_000_000, sizes or [1, 2, 3, 4, 16]),
        "scale": lambda: scale(sizes or [50_000, 500_000, 5_000_000]),
    }
    print(json.dumps({**machine, **runs[what]()}))


if __name__ == "__main__":  # a timed child (me()) starts here, without the CLI's start
    typer.run(main)
