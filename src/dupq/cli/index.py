"""``dupq index``: build a searchable collection of old questions, and keep it (``dupq search`` and ``serve``
ask it: :mod:`dupq.cli.search`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal, Optional

import typer
import typer.core

from dupq.cli.common import (
    QUESTIONS_HELP,
    THREADS,
    CollectionArgument,
    CollectionModel,
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
from dupq.core.files import check_apart, check_new_folder

index_app = typer.Typer(help="Build and grow a searchable question collection.", no_args_is_help=True)
app.add_typer(index_app, name="index")


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
