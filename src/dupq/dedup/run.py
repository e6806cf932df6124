"""``dupq dedup`` on an archive of any size: streamed in, resumable, streamed out.

The run keeps its intermediate results in a **work folder** beside the output (``OUT.work``), one stage after another,
each recorded in ``state.json`` only once its files are complete:

1. **read**: the questions streamed in, texts and keys appended to flat files (8 bytes of offset a
   question in memory), with an 8-byte hash of each text, so equal texts (and repeated keys) are
   found without a dictionary of every text;
2. **encode**: unit vectors into ``vectors.npy`` a chunk at a time (a reranker's into
   ``reranked.npy``), the count recorded after each chunk: a killed run goes on from the last;
3. **search**: each question's candidates (:mod:`dupq.dedup.candidates`) judged as the model (or
   reranker) judges pairs, the duplicates appended to an edge file a block at a time;
4. **group** and **write**: the edges made into groups (:mod:`dupq.dedup.clusters`) streamed out,
   surest first, through a temporary file renamed into place, each row with its tier
   (:mod:`dupq.dedup.review`, which also writes the review page).

Memory grows linearly (``(4d + 8)`` bytes a question and the edges), never a matrix of pairs. A run started again with
the same input, model and options resumes; with anything else it starts over. The work folder is removed once the output
is written or the input refused; only a folder dupq marked (:data:`MARKER`), or an empty one, is reused or deleted.
``engine`` (:mod:`dupq.dedup.engine`: :class:`Local` or a Ray cluster) encodes and searches; when it fails mid-way the
work folder is kept for the resume. :func:`dedup_file` and :func:`dedup_collection` are the two sources; the output may
be neither input nor inside the work folder.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import shutil
from array import array
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from dupq.core.errors import DupqError
from dupq.core.files import atomic_output, atomic_write, check_apart, remove_stale
from dupq.data.questions import Dropped, stream_questions
from dupq.data.tables import RowWriter, format_of
from dupq.dedup.candidates import BLOCK, CandidateConfig, plan, probes, train_centroids
from dupq.dedup.clusters import Edges
from dupq.dedup.engine import Engine, Local, interrupted
from dupq.dedup.grouping import DedupConfig, group, same_pairs, text_hash
from dupq.dedup.review import Group, check_review_folder, ranked, write_review
from dupq.dedup.work import EDGE_FILES, MARKER, Work
from dupq.modeling.model import Model
from dupq.modeling.verdict import dedup_tiers

ENCODE_CHUNK = 16_384  # questions encoded between two records of progress
SEARCH_BLOCK = BLOCK  # queries searched and judged between two records of progress
COLUMNS = ["cluster", "representative", "index", "key", "score", "score_is", "tier", "size", "confidence", "text"]
SHOWN = 3  # groups a run's summary names
VERBATIM = {"key"}  # columns written as they are (a key is joined on; the CSV formula guard would change it)
Progress = Callable[[str, int, int], None]  # (stage, done, total)


def _quiet(stage: str, done: int, total: int) -> None:
    pass


@dataclass
class Record:
    """A question to group: its text, its key, and its vector when the source has one already."""

    text: str
    key: str
    vector: np.ndarray | None = None
    reranked: np.ndarray | None = None  # its reranker vector, when the source has one stored


@dataclass
class Summary:
    """What a run did, for the command's last line and for scripts."""

    questions: int
    clusters: int
    duplicates: int
    threshold: float
    score_is: str
    resumed_from: str | None  # the stage a resumed run went on in (read, encode, search, group); None: a fresh run
    same_text: int  # pairs of questions with the very same text
    tiers: dict  # the tier thresholds of a member's score (dupq.modeling.verdict.dedup_tiers)
    surest: list[dict]  # the first groups of the output: {"cluster", "size", "confidence", "text"} each


def partition(work: Work, config: CandidateConfig, probing=probes) -> tuple[np.ndarray, np.ndarray]:
    """The k-means centroids and each question's probed lists (found by ``probing``), computed once and kept
    in the work folder."""
    if not work.state.get("partitioned"):
        vectors = np.load(work.path("vectors.npy"), mmap_mode="r")
        centroids = train_centroids(vectors, config)
        np.save(work.path("centroids.npy"), centroids)
        np.save(work.path("probes.npy"), probing(vectors, centroids, config.nprobe))
        work.record(partitioned=True)
    return np.load(work.path("centroids.npy")), np.load(work.path("probes.npy"), mmap_mode="r")


def run(
    records: Iterable[Record],
    out: Path,
    model: Model,
    config: DedupConfig,
    identity: dict,
    work_folder: Path | None = None,
    engine: Engine | None = None,
    progress: Progress = _quiet,
    review: Path | None = None,
    reranker: Model | None = None,
) -> Summary:
    """Group ``records`` into duplicates and write them to ``out`` (.csv, .jsonl or .parquet), and their review
    page into the new folder ``review`` when given (:func:`dupq.dedup.review.write_review`).

    ``identity`` says what the input is (a path, its size and time): with the model and the options it
    decides whether a work folder left by a killed run is resumed. ``out`` may not lie in the work folder.
    ``reranker``: the model that judges the candidates ``model`` finds (its threshold, its scores)."""
    kind = format_of(out)
    if review is not None:
        check_review_folder(review)
    engine = engine or Local()
    if reranker is not None and not engine.reranks:
        raise DupqError(
            "a reranker judges on this machine only (it is not shipped to a Ray cluster); drop --ray, or the "
            "reranker (--rerank, or --no-rerank for a collection's)."
        )
    work = Work(Path(work_folder) if work_folder else out.with_name(out.name + ".work"))
    check_apart(out, work.folder)
    key = {"input": identity, "model": model.fingerprint(), "config": asdict(config), "format": 1}
    if reranker is not None:
        key["rerank"] = reranker.fingerprint()
    judging = reranker or model  # the model whose verdict, threshold and scores the groups carry
    resumed = _open(work, key)
    try:
        if not work.state.get("read"):
            _read(work, records, progress)
        if work.state["read"]["questions"] == 0:
            raise DupqError("the input holds no questions.")
    except DupqError:
        shutil.rmtree(work.folder, ignore_errors=True)  # a refused input leaves nothing behind
        raise
    n = work.state["read"]["questions"]
    try:
        with engine.watch(work.folder):
            _encode(work, model, engine, progress)
            if reranker is not None:
                _encode(work, reranker, engine, progress, RERANKED)
            _search(work, model, judging, config, engine, progress)
    except DupqError as e:  # the engine failed (a Ray cluster lost): what is done stays done
        raise DupqError(interrupted(str(e), work.folder)) from None
    remove_stale(out.parent)  # the temporary file of a write killed before its rename
    vectors = np.load(work.path((ENCODED if reranker is None else RERANKED)[0]), mmap_mode="r")  # the judge's
    clusters = group(Edges.join([work.edges(), _same_text_edges(work)]), vectors, judging, config)
    progress("write", 0, clusters.duplicates + clusters.count)
    thresholds = dedup_tiers(judging, config.threshold_for(judging), config.score_is(judging))
    groups = ranked(clusters)
    _write(work, out, kind, groups, thresholds, progress)
    text = work.strings("texts").read()
    if review is not None:
        write_review(review, groups, text, work.strings("keys").read(), thresholds)
    surest = [
        {"cluster": g.number, "size": g.size, "confidence": round(g.confidence, 4), "text": text(g.representative)}
        for g in groups[:SHOWN]
    ]
    same = work.state["read"]["same_text"]
    shutil.rmtree(work.folder, ignore_errors=True)
    return Summary(
        n,
        clusters.count,
        clusters.duplicates,
        config.threshold_for(judging),
        config.score_is(judging),
        resumed,
        same,
        thresholds,
        surest,
    )


def _open(work: Work, key: dict) -> str | None:
    """Resume the work folder when it was left by the same run; else start it afresh. Returns the stage resumed.

    Only a folder dupq made (its :data:`MARKER` inside) or an empty one is used: any other is refused, never emptied."""
    folder = work.folder
    if folder.exists() and not folder.is_dir():
        raise DupqError(f"the work folder {folder} is a file; name a folder with --work.")
    if folder.is_dir() and not work.path(MARKER).is_file() and any(folder.iterdir()):
        raise DupqError(
            f"{folder} is in the way of the run's work folder (dupq did not make it); move it, or name another "
            "with --work."
        )
    try:
        state = work.state if folder.is_dir() else {}
    except DupqError:
        state = {}  # dupq's own folder, its state damaged: started afresh
    if state.get("key") == key:
        if not state.get("read"):
            return "read"
        n = state["read"]["questions"]
        if state.get("encoded", 0) < n or ("rerank" in key and state.get("reranked", 0) < n):
            return "encode"
        return "search" if state.get("searched", 0) < -(-n // SEARCH_BLOCK) else "group"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    atomic_write(work.path(MARKER), b"A work folder of dupq dedup: deleted when its run ends.\n")
    work.record(key=key)
    return None


def _read(work: Work, records: Iterable[Record], progress: Progress) -> None:
    texts, keys = work.strings("texts").writer(), work.strings("keys").writer()
    text_hashes, key_hashes, given, reranked = array("q"), array("q"), [], []  # 8 bytes a question, not an int
    for i, r in enumerate(records):
        texts.add(r.text)
        keys.add(r.key)
        text_hashes.append(text_hash(r.text))
        key_hashes.append(text_hash(r.key))
        if r.vector is not None:
            given.append(r.vector)
        if r.reranked is not None:
            reranked.append(r.reranked)
        if i % 65_536 == 0:
            progress("read", i, 0)
    texts.close()
    keys.close()
    n = len(text_hashes)
    th, kh = np.frombuffer(text_hashes, np.int64), np.frombuffer(key_hashes, np.int64)
    repeated = next(same_pairs(kh, work.strings("keys").read()), None)
    if repeated is not None:
        key = work.strings("keys").read()(repeated[0])
        raise DupqError(
            f"the key {key!r} names two questions (numbers {repeated[0]} and {repeated[1]}); give each its own."
        )
    same = np.asarray(list(same_pairs(th, work.strings("texts").read())), dtype=np.int64).reshape(-1, 2)
    np.save(work.path("same_text.npy"), same)
    if given:
        np.save(work.path("vectors.npy"), np.stack(given).astype(np.float32))
    whole = bool(reranked) and len(reranked) == n  # a source with some or none of them: all encoded by the run
    if whole:
        np.save(work.path(RERANKED[0]), np.stack(reranked).astype(np.float32))
    work.record(read={"questions": n, "same_text": len(same)}, encoded=n if given else 0, reranked=n if whole else 0)
    progress("read", n, n)


def _same_text_edges(work: Work) -> Edges:
    same = np.load(work.path("same_text.npy"))
    return Edges(same[:, 0], same[:, 1], np.ones(len(same), np.float32))


ENCODED = ("vectors.npy", "encoded", "encode")  # the model's vectors: their file, their count's name, the stage
RERANKED = ("reranked.npy", "reranked", "rerank")  # the reranker's likewise


def _encode(work: Work, model: Model, engine: Engine, progress: Progress, into: tuple = ENCODED) -> None:
    """Encode every question by ``model`` into the file ``into`` names, a chunk at a time, each recorded."""
    name, count, stage = into
    n, done = work.state["read"]["questions"], work.state.get(count, 0)
    if done >= n:
        return
    if not work.path(name).is_file():
        np.lib.format.open_memmap(work.path(name), mode="w+", dtype=np.float32, shape=(n, model.out_dim)).flush()
    vectors = np.load(work.path(name), mmap_mode="r+")
    progress(stage, done, n)
    for lo, v in engine.encode(model, work.strings("texts").chunks(ENCODE_CHUNK, start=done)):
        vectors[lo : lo + len(v)] = v
        vectors.flush()
        done = lo + len(v)
        work.record(**{count: done})
        progress(stage, done, n)
    del vectors


def _search(work: Work, model: Model, judging: Model, config: DedupConfig, engine: Engine, progress: Progress) -> None:
    n, state = work.state["read"]["questions"], work.state
    blocks = -(-n // SEARCH_BLOCK)
    start = state.get("searched", 0)
    if start >= blocks:
        return
    count = state.get("edges", 0)
    files = []
    for name, dtype in EDGE_FILES:  # cut what a killed block wrote past its record
        path = work.path(name)
        with open(path, "ab") as f:
            f.truncate(count * np.dtype(dtype).itemsize)
        files.append(open(path, "ab"))
    try:
        progress("search", start * SEARCH_BLOCK, n)
        vectors = np.load(work.path("vectors.npy"), mmap_mode="r")
        searched = plan(vectors, config.candidates, lambda v, c: partition(work, c, engine.probes), SEARCH_BLOCK)
        reranked = None if judging is model else np.load(work.path(RERANKED[0]), mmap_mode="r")
        for block, edges in engine.search(judging, config, vectors, searched, start, reranked):
            for f, values, (_, dtype) in zip(files, (edges.a, edges.b, edges.score), EDGE_FILES):
                f.write(values.astype(dtype).tobytes())
                f.flush()
                os.fsync(f.fileno())
            count += len(edges)
            work.record(searched=block + 1, edges=count)
            progress("search", min(n, (block + 1) * SEARCH_BLOCK), n)
    finally:
        for f in files:
            f.close()


def _write(work: Work, out: Path, kind: str, groups: list[Group], thresholds: dict, progress: Progress) -> None:
    text, key = work.strings("texts").read(), work.strings("keys").read()
    batch, written, on = [], 0, thresholds["on"]
    with atomic_output(out) as f, RowWriter(f, kind, COLUMNS, verbatim=VERBATIM) as writer:
        for g in groups:
            confidence = round(g.confidence, 4)
            for j, (i, score, tier) in enumerate(zip(g.members.tolist(), g.scores.tolist(), g.tiers(thresholds))):
                row = (g.number, int(j == 0), i, key(i), round(score, 4), on, tier, g.size, confidence, text(i))
                batch.append(dict(zip(COLUMNS, row)))
            if len(batch) >= 8192:
                writer.write(batch)
                written += len(batch)
                batch = []
                progress("write", written, 0)
        writer.write(batch)


def dedup_file(
    path: str | os.PathLike,
    out: Path,
    model: Model | str | os.PathLike | None,
    config: DedupConfig,
    *,
    column: str | None = None,
    key_column: str | None = None,
    work_folder: Path | None = None,
    engine: Engine | None = None,
    progress: Progress = _quiet,
    dropped: Dropped | None = None,
    review: Path | None = None,
    rerank: Model | str | os.PathLike | None = None,
) -> Summary:
    """Group the questions of the file ``path`` (any kind :func:`~dupq.data.questions.stream_questions` reads) into
    ``out``: each keyed by ``key_column``, else its line number. ``model`` a model or its folder (None: the bundled
    one), loaded once the file's first question is read, so that a bad file or column is refused first.
    ``dropped`` counts the lines that hold no question; ``review``: the new folder of the run's review page;
    ``rerank``: a reranker (a model or its folder, or a name such as ``minilm``) that judges the candidates."""
    path, out = Path(path), Path(out)
    check_apart(out, path, work_folder)
    stat = path.stat() if path.exists() else None
    identity = {"file": str(path.resolve()), "size": stat and stat.st_size, "mtime": stat and stat.st_mtime_ns}
    identity.update(column=column, key_column=key_column)
    stream = stream_questions(path, column, key_column, dropped)
    first = next(stream, None)
    model = model if isinstance(model, Model) else Model.load(model)
    reranker = rerank if rerank is None or isinstance(rerank, Model) else Model.load(rerank)

    def records() -> Iterator[Record]:
        if first is None:
            return
        for q in itertools.chain([first], stream):
            yield Record(q.text, q.key if q.key is not None else str(q.line))

    return run(records(), out, model, config, identity, work_folder, engine, progress, review, reranker)


def collection_reranker(collection, rerank: Model | bool | None, store: bool = True) -> tuple[Model | None, dict]:
    """The reranker that judges a run over ``collection`` (``rerank``: None, the collection's where it has one;
    False, none; a model, that one) and its vectors ``{id: (d',)}`` stored in the collection: with the
    collection's own and ``store``, what is not stored yet is encoded now, once, and kept for its searches too."""
    if isinstance(rerank, Model) or rerank is False:
        return (rerank if isinstance(rerank, Model) else None), {}
    if collection.reranker is None or not store:
        return collection.reranker, {}
    collection.rerank_all()
    return collection.reranker, collection.stored_reranker_vectors()


def dedup_collection(
    collection,
    out: Path,
    config: DedupConfig,
    *,
    work_folder: Path | None = None,
    engine: Engine | None = None,
    progress: Progress = _quiet,
    review: Path | None = None,
    rerank: Model | bool | None = None,
) -> Summary:
    """Group the questions of an open :class:`~dupq.collection.collection.Collection` (any backend) into ``out``,
    with their stored vectors and the collection's model: each keyed by its key, else its id.

    Read through the collection's API, by id (a collection with removed or updated questions has gaps in its
    ids); the run resumes while the stored questions stay the same. ``rerank``: None, the collection's
    reranker judges where it has one (its vectors encoded once and stored in the collection, as a search
    stores them); False, none; a model, that one."""
    out = Path(out)
    check_apart(out, collection.location.local_path, work_folder)
    rows = collection.stored_rows()
    ids = [i for i, _, _, _ in rows]
    vectors = collection.stored_vectors(ids) if ids else np.zeros((0, collection.model.out_dim), np.float32)
    digest = hashlib.blake2b(digest_size=16)
    for i, key, text, _ in rows:
        digest.update(f"{i}\x00{key}\x00{text}\x01".encode())
    where = collection.location
    identity = {"collection": str(where.path.resolve()) if where.path else str(where), "rows": digest.hexdigest()}
    reranker, stored = collection_reranker(collection, rerank, store=engine is None or engine.reranks)
    records = (
        Record(text, str(i) if key is None else key, vectors[j], stored.get(i))
        for j, (i, key, text, _) in enumerate(rows)
    )
    return run(records, out, collection.model, config, identity, work_folder, engine, progress, review, reranker)
