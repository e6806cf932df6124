"""The address of a Milvus collection: ``milvus:PATH.db`` (milvus-lite) or ``milvus+http(s)://HOST:PORT?collection=NAME``."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from dupq.core.errors import DupqError

DEFAULT_NAME = "dupq"
LITE, SERVER = "milvus:", "milvus+"  # the prefixes of a milvus-lite file and of a server's address


def is_milvus(location) -> bool:
    """Whether ``location`` (text) names a Milvus collection (``milvus:PATH.db``, ``milvus+http(s)://...``)."""
    return isinstance(location, str) and location.startswith((LITE, SERVER))


def is_lite(location: str) -> bool:
    """Whether a Milvus ``location`` names a milvus-lite file, which one process at a time may open."""
    return location.startswith(LITE)


@dataclass
class Address:
    """Where a Milvus collection is: the client's URI, the collection's name, and the file of milvus-lite (else None)."""

    uri: str
    name: str
    file: Path | None
    text: str  # as the user wrote it, for messages


def parse(location: str) -> Address:
    """A ``milvus:PATH.db`` or ``milvus+http(s)://HOST:PORT?collection=NAME`` location, or a DupqError saying what is wrong."""
    lite = is_lite(location)
    rest = location.removeprefix(LITE if lite else SERVER)
    try:
        parts = urlsplit(rest)
    except ValueError as e:  # an unclosed "[" of an IPv6 address, say
        raise DupqError(f"the Milvus location {location} is not a valid address ({e}).") from None
    path, _, settings = rest.partition("?") if lite else (parts.path, None, parts.query)
    query = parse_qs(settings)
    name = query.pop("collection", [DEFAULT_NAME])[-1]
    if query:
        raise DupqError(
            f"the Milvus location {location} has unknown settings ({', '.join(query)}); only ?collection=NAME is read."
        )
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,199}", name):
        raise DupqError(
            f"the Milvus collection name {name!r} in {location} must be letters, digits and _, not starting with a digit."
        )
    if lite:
        if not path.endswith(".db"):
            raise DupqError(f"the milvus-lite location {location} must name a file ending in .db (milvus:PATH.db).")
        file = Path(path).absolute()
        return Address(str(file), name, file, location)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise DupqError(
            f"the Milvus location {location} is not milvus+http://HOST:PORT?collection=NAME (or milvus+https://...)."
        )
    try:
        port = parts.port
    except ValueError:
        raise DupqError(f"the port in the Milvus location {location} is not a number from 1 to 65535.") from None
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname  # an IPv6 address keeps its brackets
    return Address(f"{parts.scheme}://{host}:{port or 19530}", name, None, location)
