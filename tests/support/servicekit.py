"""Helpers for the service tests: a small collection of the small split's questions (and a few written here, one
with HTML in it, to check that the page shows it as text), and the stores that may be missing here."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import pytest

from dupq.data.pairs import Splits
from support.serving import LiveServer, free_port

__all__ = ["EXTRA", "LiveServer", "build_collection", "free_port", "milvus_or_skip", "postgres_or_skip", "questions"]

EXTRA = ["How can I lose weight fast?", "<b>How do I lose weight</b> without exercise?"]


def questions(splits: Splits, n: int) -> list[str]:
    """``n`` distinct questions: ``EXTRA`` first, then the pool's questions in file order."""
    seen = dict.fromkeys(EXTRA)
    for a, b in zip(splits.pool.q1, splits.pool.q2):
        for q in (a, b):
            if len(seen) >= n:
                return list(seen)
            if q.strip():
                seen.setdefault(q)
    return list(seen)


def build_collection(folder: Path | str, model_dir: Path, texts: list[str]) -> Path | str:
    """A flat collection of ``texts`` in ``folder`` (or a Milvus location); each question's metadata is its position."""
    from dupq.collection.collection import Collection
    from dupq.modeling.model import Model

    Collection.build(folder, texts, Model.load(model_dir), metadata=[{"row": i} for i in range(len(texts))]).close()
    return folder


def lacking(extra: str, error: ImportError) -> None:
    """Skip, saying which extra to install for a store whose packages are missing (an error under CI)."""
    message = f"{extra} store: {error}; install the {extra} extra (pip install -e '.[{extra}]')"
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


def milvus_or_skip(path: Path) -> str:
    """A milvus-lite location at ``path`` (a fresh file per test), or a skip saying why Milvus cannot run here (an error under CI)."""
    try:
        import milvus_lite  # noqa: F401
        import pymilvus  # noqa: F401
    except ImportError as e:
        lacking("milvus", e)
    return f"milvus:{path}"


@contextlib.contextmanager
def postgres_or_skip(folder: Path):
    """A private PostgreSQL server with pgvector in ``folder`` (pgserver), as the URI of its database ``postgres``
    reached by its socket; a skip saying why it cannot run here (an error under CI). Stopped at the end.

    As root, pgserver runs the server as a system user ``pgserver`` it creates (Postgres refuses root).
    """
    try:
        import pgserver
        import psycopg  # noqa: F401
        from pgvector.psycopg import register_vector  # noqa: F401
    except ImportError as e:
        lacking("postgres", e)
    server = pgserver.get_server(folder / "data", cleanup_mode="delete")
    try:
        socket = server.get_postmaster_info().socket_dir
        yield f"postgresql://postgres@/postgres?host={socket}"
    finally:
        server.cleanup()
