"""``dupq search`` and ``serve``: a collection of old questions asked for the ones like a new question."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from dupq.cli.common import THREADS, CollectionArgument, CollectionModel, Threads, _dropped, _threads, command
from dupq.core.errors import DupqError
from dupq.core.files import to_json
from dupq.service.refit import REFIT_EVERY


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
