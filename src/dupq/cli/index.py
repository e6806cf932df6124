"""``dupq index``, ``search`` and ``serve``: a searchable collection of old questions."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal, Optional

import typer
import typer.core

from dupq.cli.common import (
    QUESTIONS_HELP,
    THREADS,
    CollectionArgument,
    ModelOption,
    Threads,
    _dropped,
    _threads,
    app,
    command,
    model_option,
    out_location,
)
from dupq.core.errors import DupqError
from dupq.core.files import check_apart, check_new_folder, to_json
from dupq.service.refit import REFIT_EVERY

index_app = typer.Typer(help="Build and grow a searchable question collection.", no_args_is_help=True)
app.add_typer(index_app, name="index")
# The model of a command on a collection: the one the collection was built with unless another is given.
CollectionModel = Annotated[
    Optional[Path], model_option("Model folder (default: the one the collection was built with).")
]


@command(group=index_app, name="build", refused={"--store": "--out LOCATION"})
def index_build(
    questions: Annotated[Path, typer.Argument(help=QUESTIONS_HELP)],
    out: Annotated[str, out_location()],
    model: ModelOption = None,
    index: Annotated[
        Literal["flat", "hnsw", "ivfpq"],
        typer.Option(
            help="flat (exact search), hnsw (approximate, much faster on large collections) or ivfpq (compressed to ~41 bytes a question, re-ranked exactly; 40,000+ questions)."
        ),
    ] = "flat",
    column: Annotated[
        Optional[str],
        typer.Option(help="The question column of a CSV/TSV file (default: question); other columns become metadata."),
    ] = None,
    key_column: Annotated[
        Optional[str],
        typer.Option(
            help="The column of a CSV/TSV file that holds each question's key (a Quora file's qids are keys)."
        ),
    ] = None,
    rerank: Annotated[
        Optional[Path],
        typer.Option(
            "--rerank",
            metavar="MODEL",
            help="A second model that orders each search's best candidates and judges them (slower, better); the collection remembers it.",
        ),
    ] = None,
    rerank_now: Annotated[
        bool,
        typer.Option(
            help="Encode every question with the --rerank model now (else each at its first search, and stored)."
        ),
    ] = False,
    threads: Threads = THREADS,
) -> None:
    """Store the questions of a file, their embeddings and a search index in a new collection (a folder, or Milvus)."""
    import time

    from dupq.collection.collection import Collection, Location
    from dupq.data.questions import read_questions
    from dupq.index.vectors import IndexConfig
    from dupq.modeling.model import Model

    _threads(threads)
    config = IndexConfig(kind=index)
    where = Location.parse(out)
    if where.path is not None:
        check_new_folder(where.path, overwrite=None)  # before the model and the file are read; the build checks again
    if where.local_path is not None:
        check_apart(where.local_path, questions)
    if rerank_now and rerank is None:
        raise DupqError("--rerank-now goes with --rerank MODEL.")
    m = Model.load(model)
    reranker = None if rerank is None else Model.load(rerank)
    qs = read_questions(questions, column, key_column)
    _dropped(questions, qs.dropped)
    if not qs.texts:
        raise DupqError(f"{questions} holds no questions.")
    started = time.perf_counter()
    Collection.build(
        where, qs.texts, m, keys=qs.keys, metadata=qs.metadata, index=config, rerank=reranker, rerank_now=rerank_now
    ).close()
    reranked = "" if reranker is None else f", reranked by {rerank}" + (" (encoded now)" if rerank_now else "")
    typer.echo(
        f"stored {len(qs):,} questions from {questions} in {where} ({index} index{reranked}) in "
        f"{time.perf_counter() - started:.1f}s; skipped {qs.skipped:,}"
    )


def _added(ids: list[int], new: int) -> str:
    """What ``index add`` says of a batch of which ``new`` questions were stored (the others' keys were
    stored already): a range where the ids are consecutive (a folder's), else the first and last (Milvus's hashed keys)."""
    if len(ids) == 1:
        return f"added 1 question: id {ids[0]}" if new else f"the key is stored already (id {ids[0]}): nothing added"
    consecutive = ids == list(range(ids[0], ids[0] + len(ids)))
    span = f"ids {ids[0]}-{ids[-1]}" if consecutive else f"ids {ids[0]}, ..., {ids[-1]}"
    if new < len(ids):
        return (
            f"added {new} of {len(ids)} questions ({len(ids) - new} with a key stored already: nothing added): {span}"
        )
    return f"added {len(ids)} questions: {span}"


@command(group=index_app, name="add")
def index_add(
    collection: CollectionArgument,
    question: Annotated[Optional[str], typer.Argument(help="The question to add.")] = None,
    file: Annotated[
        Optional[Path], typer.Option(help=f"Add every question of this file instead. {QUESTIONS_HELP}")
    ] = None,
    column: Annotated[Optional[str], typer.Option(help="The question column of a CSV/TSV --file.")] = None,
    key: Annotated[
        Optional[str],
        typer.Option(help="The question's key (your id for it): adding a stored key again stores nothing."),
    ] = None,
    key_column: Annotated[
        Optional[str],
        typer.Option(
            help="The column of a CSV/TSV --file that holds each question's key (a Quora file's qids are keys)."
        ),
    ] = None,
    model: CollectionModel = None,
    batch_size: Annotated[int, typer.Option(min=1, help="Questions per transaction when adding a file.")] = 1000,
    threads: Threads = THREADS,
) -> None:
    """Add a question (or a file of them); each batch's ids are printed once it is safely stored.

    With keys, running the same command again (after a crash, say) stores nothing twice.
    """
    from dupq.collection.collection import Collection
    from dupq.data.questions import check_key, check_question, read_questions
    from dupq.modeling.model import Model

    _threads(threads)
    if (question is None) == (file is None):
        raise DupqError("give either one question or --file FILE to add.")
    if question is not None:
        if key_column is not None:
            raise DupqError("--key-column goes with --file; give one question's key with --key.")
        if key is not None:
            check_key(key, "--key")
        texts, metadata, keys = [check_question(question, "the question")], None, [key]
    else:
        if key is not None:
            raise DupqError("--key goes with one question; give a file's keys with --key-column.")
        qs = read_questions(file, column, key_column)
        _dropped(file, qs.dropped)
        if not qs.texts:
            raise DupqError(f"{file} holds no questions.")
        texts, metadata, keys = qs.texts, qs.metadata, qs.keys
    coll = Collection.open(collection, Model.load(model) if model else None)
    try:
        for lo in range(0, len(texts), batch_size):
            part = slice(lo, lo + batch_size)
            before = len(coll)
            ids = coll.add(texts[part], metadata[part] if metadata else None, keys[part] if keys else None)
            typer.echo(_added(ids, min(len(ids), max(0, len(coll) - before))))
    finally:
        coll.close()
        if coll.cache_error:
            typer.echo(f"warning: {coll.cache_error}.", err=True)


@command(group=index_app, name="reencode")
def index_reencode(
    collection: CollectionArgument,
    model: Annotated[Path, model_option("The model folder to encode with (e.g. from dupq adapt).")],
    out: Annotated[str, out_location()],
    index: Annotated[
        Optional[Literal["flat", "hnsw", "ivfpq"]],
        typer.Option(help="Index kind of the new collection (default: the old one's)."),
    ] = None,
    threads: Threads = 0,
) -> None:
    """Encode every question of a collection again with another model (keys and metadata kept) into a new collection."""
    import time

    from dupq.collection.location import Location
    from dupq.collection.reencode import reencode
    from dupq.modeling.model import Model

    _threads(threads)
    started = time.perf_counter()
    with reencode(collection, Model.load(model), out, index, log=typer.echo) as new:
        typer.echo(  # the locations as shown: a password in a postgresql:// location is never printed
            f"encoded {len(new):,} questions of {Location.parse(collection)} with {model} into {new.location} in {time.perf_counter() - started:.1f}s"
        )


@command(name="search")
def search_command(
    collection: CollectionArgument,
    question: Annotated[Optional[str], typer.Argument(help="The new question.")] = None,
    k: Annotated[int, typer.Option("-k", "--k", min=1, help="How many old questions to show.")] = 10,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON line per query: the query and its hits.")] = False,
    queries: Annotated[
        Optional[Path], typer.Option(help="Search every question of this file (one a line) instead.")
    ] = None,
    model: CollectionModel = None,
    batch_size: Annotated[int, typer.Option(min=1, help="Queries encoded and searched together.")] = 256,
    where: Annotated[
        Optional[list[str]],
        typer.Option(
            help="Only questions whose metadata FIELD equals VALUE (FIELD=VALUE; repeat it: a field twice means either value; a VALUE that reads as a number or true/false matches it and its text)."
        ),
    ] = None,
    no_rerank: Annotated[
        bool,
        typer.Option("--no-rerank", help="Keep the model's order and verdicts though the collection has a reranker."),
    ] = False,
    candidates: Annotated[
        Optional[int],
        typer.Option(
            min=1,
            help="How many of the model's best the reranker orders (default: the number chosen on the help-desk dev half).",
        ),
    ] = None,
    threads: Threads = THREADS,
) -> None:
    """Show the old questions most similar to a new one, with the similarity and the verdict's tier (duplicate: safe
    to act on; suggest: worth a look), ordered and judged by the collection's reranker where it has one."""
    from dataclasses import asdict

    from dupq.collection.collection import Collection
    from dupq.data.questions import check_question, read_questions
    from dupq.modeling.model import Model

    _threads(threads)
    if (question is None) == (queries is None):
        raise DupqError("give either one question or --queries FILE to search.")
    if question is not None:
        texts = [check_question(question, "the query")]
    else:
        qs = read_questions(queries)
        _dropped(queries, qs.dropped)
        texts = qs.texts
    scope = _where(where or [])
    coll = Collection.open(collection, Model.load(model) if model else None)
    try:
        reranked = coll.reranks(False if no_rerank else None)
        tiers, by = coll.tiers_of(reranked), "; ordered by the reranker" if reranked else ""
        for lo in range(0, len(texts), batch_size):
            batch = texts[lo : lo + batch_size]
            for query, hits in zip(batch, coll.search(batch, k, where=scope, rerank=reranked, candidates=candidates)):
                if as_json:
                    typer.echo(to_json({"query": query, "hits": [asdict(h) for h in hits]}, ensure_ascii=False))
                    continue
                typer.echo(
                    f"{query}   (duplicate: {tiers['on']} above {tiers['duplicate']:.2f}; "
                    f"suggest: above {tiers['suggest']:.2f}{by})"
                )
                for rank, h in enumerate(hits, 1):
                    verdict = h.tier or "-"
                    p = "" if h.probability is None else f"  p {h.probability:.2f}"
                    key = "" if h.key is None else f"  key {h.key}"
                    canonical = "" if h.duplicate_of is None else f"  (duplicate of {h.duplicate_of})"
                    typer.echo(f"  {rank:>3}  {h.score:.3f}{p}  {verdict:<9}  id {h.id:<7}{key}  {h.text}{canonical}")
    finally:
        coll.close()


def _where(pairs: list[str]) -> dict[str, list]:
    """``--where FIELD=VALUE`` options as a filter (:func:`~dupq.collection.backend.where_from_text`)."""
    from dupq.collection.backend import where_from_text

    split = []
    for pair in pairs:
        field, eq, value = pair.partition("=")
        if not eq or not field:
            raise DupqError(f"--where takes FIELD=VALUE, not {pair!r}.")
        split.append((field, value))
    return where_from_text(split)


@command(group=index_app, name="remove")
def index_remove(
    collection: CollectionArgument,
    keys: Annotated[list[str], typer.Argument(help="The keys of the questions to remove.")],
) -> None:
    """Remove questions by key, in one transaction: no search finds them once this prints (a key not stored removes nothing)."""
    from dupq.collection.collection import Collection

    with Collection.open(collection) as coll:
        ids = coll.remove(keys)
        typer.echo(
            f"removed {len(ids)} question{'s' if len(ids) != 1 else ''} from {coll.location}; {len(coll):,} remain"
        )


@command(group=index_app, name="update")
def index_update(
    collection: CollectionArgument,
    key: Annotated[str, typer.Argument(help="The key of the question to change.")],
    text: Annotated[
        Optional[str], typer.Option(help="Its new text (encoded again; the old text is found no more).")
    ] = None,
    metadata: Annotated[
        Optional[str], typer.Option(help="Its new metadata, a JSON object (replaces the stored metadata).")
    ] = None,
    model: CollectionModel = None,
) -> None:
    """Change a stored question's text or metadata by key, in one transaction (the same change again writes nothing)."""
    import json

    from dupq.collection.collection import Collection
    from dupq.modeling.model import Model

    try:
        meta = None if metadata is None else json.loads(metadata)
    except (ValueError, RecursionError) as e:
        raise DupqError(f"--metadata is not JSON ({e}).") from None
    with Collection.open(collection, Model.load(model) if model else None) as coll:
        i = coll.update(key, text=text, metadata=meta)
        typer.echo(f"updated the question {key} of {coll.location}: id {i}")


@command(group=index_app, name="decisions")
def index_decisions(
    collection: CollectionArgument,
    out: Annotated[Path, typer.Option(help="The pairs file to write (TSV in the Quora file's columns).")],
) -> None:
    """Write the moderators' decisions as labelled pairs, which `dupq calibrate --pairs` and `dupq train` take."""
    from dupq.collection.collection import Collection, Location
    from dupq.data.pairs import write_pairs

    check_apart(out, Location.parse(collection).local_path)
    with Collection.open(collection) as coll:
        pairs = coll.decisions()
    write_pairs(out, pairs)
    typer.echo(f"wrote {len(pairs):,} decisions of {coll.location} to {out}")


@command(group=index_app, name="info")
def index_info(collection: CollectionArgument) -> None:
    """Show what a collection holds and what judges its hits: its own calibration (or the model's), what it was
    fitted on, and the scopes fitted (as JSON; /health says the same)."""
    import json

    from dupq.collection.collection import Collection

    with Collection.open(collection) as coll:
        shown = {
            "location": str(coll.location),
            "questions": len(coll),
            "model_fingerprint": coll.model.fingerprint(),
            "tiers": coll.tiers,
            "calibration": coll.calibration_info(),
        }
    typer.echo(json.dumps(shown, indent=2))


@command(group=index_app, name="calibrate")
def index_calibrate(
    collection: CollectionArgument,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
    scope: Annotated[
        Optional[str],
        typer.Option(
            metavar="FIELD",
            help="Also fit one calibration per value of this metadata field (of the question judged against) that "
            "has decisions enough; hits of the other values are judged by the collection's.",
        ),
    ] = None,
    force: Annotated[
        bool, typer.Option(help="Keep the refit even where it judges the held-out decisions worse than today's.")
    ] = False,
) -> None:
    """Refit the collection's own search calibration on its moderators' decisions; its searches use it from then on.

    Reports accuracy, ROC-AUC, ECE and each tier's precision/recall on held-out decisions, before and after."""
    import json

    from dupq.collection.collection import Collection
    from dupq.evaluation.collection_calibration import calibrate_collection

    with Collection.open(collection) as coll:
        report = calibrate_collection(coll, scope=scope, force=force)
    if as_json:
        typer.echo(json.dumps(report))
        return
    held = report["held_out"]
    typer.echo(
        f"fitted the search calibration of {coll.location} on {report['decisions']:,} decisions "
        f"({report['duplicates']:,} duplicates); tiers: suggest {report['calibration']['suggest']:.4f}, "
        f"duplicate {report['calibration']['duplicate']:.4f}"
    )
    for when in ("before", "after"):
        m = held[when]
        tiers = ", ".join(
            f"{t} precision {m[t]['precision']} recall {m[t]['recall']}" for t in ("suggest", "duplicate")
        )
        typer.echo(
            f"{held['decisions']} held-out decisions, {when}: accuracy {m['accuracy']}, ROC-AUC {m['roc_auc']}, "
            f"ECE {m['ece']}; {tiers}"
        )
    scopes = report["scopes"]
    if scopes is not None:
        fitted = ", ".join(f"{v} ({f['decisions']})" for v, f in scopes["fitted"].items()) or "none"
        left = ", ".join(f"{v} ({n})" for v, n in scopes["too_few"].items()) or "none"
        typer.echo(f"scopes of {scopes['field']} fitted: {fitted}; judged by the collection's (too few): {left}")


@command()
def serve(
    collection: CollectionArgument,
    model: CollectionModel = None,
    host: Annotated[str, typer.Option(help="Address to listen on; 127.0.0.1 keeps it to this machine.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=1, max=65535, help="TCP port.")] = 8000,
    protect_reads: Annotated[
        bool,
        typer.Option(
            help="Searches, similarities, /health and /metrics need a token too (the write token or $DUPQ_READ_TOKEN)."
        ),
    ] = False,
    threads: Threads = THREADS,
    workers: Annotated[
        Optional[int],
        typer.Option(
            min=1,
            help="Worker processes, each with its own copy of the index (default: one per core; one for milvus-lite).",
        ),
    ] = None,
    refit_every: Annotated[
        int,
        typer.Option(
            min=0,
            metavar="N",
            help="Refit the collection's calibration in the background after every N decisions a worker records "
            "(0: never).",
        ),
    ] = REFIT_EVERY,
) -> None:
    """Serve the HTTP API and the web page at http://HOST:PORT/; writes need $DUPQ_API_TOKEN as a bearer token
    (reads, with --protect-reads or $DUPQ_READ_TOKEN set, that token or the write token)."""
    from dupq.service.workers import default_workers, refuse_inherited_metrics

    refuse_inherited_metrics()  # before the metrics are imported: prometheus-client reads the variable then
    from dupq.service.server import serve as run_server

    run_server(
        collection,
        model,
        host=host,
        port=port,
        protect_reads=protect_reads,
        threads=threads,
        log=typer.echo,
        workers=workers or default_workers(collection),
        refit_every=refit_every,
    )
