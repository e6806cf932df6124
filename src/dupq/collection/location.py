"""Where a collection lives, and which backend keeps it: the one place that tells them apart.

A location is written as text (a command's argument, a service's setting) or given as a path:

* ``runs/faq`` (any path): a folder, kept by SQLite and FAISS (:mod:`dupq.collection.folder.backend`);
* ``milvus:PATH.db`` (milvus-lite) or ``milvus+http(s)://HOST:PORT?collection=NAME`` (a server):
  a Milvus collection (:mod:`dupq.collection.milvus.backend`);
* ``postgresql://USER@HOST:PORT/DB?table=NAME``: tables in a PostgreSQL database with pgvector
  (:mod:`dupq.collection.postgres.backend`); a password in it is never shown (``text`` has ``***``).

:meth:`Location.parse` reads it; :meth:`Location.backend` is the class that builds and opens it. Nothing above this
module asks which backend a collection has: a third backend is one module and one line of :data:`BACKENDS`.

>>> Location.parse("milvus:runs/faq.db").kind, Location.parse("runs/faq").kind
('milvus', 'folder')
"""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass, field
from pathlib import Path

from dupq.collection.milvus.address import is_lite, is_milvus, parse
from dupq.collection.postgres.address import is_postgres, redact
from dupq.core.errors import DupqError

# kind -> "module:class" of its backend, imported only when used (pymilvus is an extra)
BACKENDS = {
    "folder": "dupq.collection.folder.backend:FolderBackend",
    "milvus": "dupq.collection.milvus.backend:MilvusBackend",
    "postgres": "dupq.collection.postgres.backend:PostgresBackend",
}


@dataclass(frozen=True)
class Location:
    """A collection's place: its ``kind`` (a key of :data:`BACKENDS`), as written, and its folder (folders only)."""

    kind: str
    text: str  # as the user wrote it (a password as ***): what messages show
    path: Path | None = None  # the folder of a folder collection
    given: str | None = field(default=None, repr=False, compare=False)  # as written, password and all: what connects

    @classmethod
    def parse(cls, value: str | os.PathLike | Location) -> Location:
        """A location from text, a path, or a location (returned as it is)."""
        if isinstance(value, Location):
            return value
        if is_milvus(value):
            return cls("milvus", value)
        if is_postgres(value):
            return cls("postgres", redact(value), given=value)
        return cls("folder", str(value), Path(value))

    @property
    def one_process(self) -> bool:
        """Whether one process at a time may open it (milvus-lite's file): ``dupq serve`` then runs one worker."""
        return self.kind == "milvus" and is_lite(self.text)

    def holds_collection(self) -> bool:
        """Whether a collection seems to be there (a folder with a manifest; a Milvus location is asked when opened)."""
        return self.backend().holds(self)

    @property
    def local_path(self) -> Path | None:
        """The folder or file on this machine that holds the collection (a folder, a milvus-lite file), else None."""
        if self.kind == "folder":
            return self.path
        return parse(self.text).file if self.one_process else None

    def backend(self) -> type:
        """The :class:`~dupq.collection.backend.Backend` subclass that keeps collections of this kind."""
        module, name = BACKENDS[self.kind].split(":")
        try:
            return getattr(importlib.import_module(module), name)
        except ImportError as e:  # its extra is not installed (the folder's needs nothing beyond the base install)
            raise DupqError(
                f"a {self.kind} collection needs {e.name}, which is not installed; install it with "
                f'`pip install -e ".[{self.kind}]"`.'
            ) from None

    @property
    def address(self) -> str:
        """The location as written, a password included: what a backend connects with (never print it)."""
        return self.given if self.given is not None else self.text

    def __str__(self) -> str:
        return self.text
