"""The address of a Postgres collection: ``postgresql://USER@HOST:PORT/DB?table=NAME``, and its password kept out of sight.

A libpq connection URI with one setting of dupq's own, ``table`` (default ``dupq``); the rest goes
to libpq as it is (``sslmode``, ``connect_timeout``, its password search: URI, ``$PGPASSWORD``,
``~/.pgpass``). A password in the URI is kept in :attr:`Address.conninfo` only;
:attr:`Address.text`, what every message shows, has ``***``.

>>> parse("postgresql://app:secret@db:5432/helpdesk?table=faq").text
'postgresql://app:***@db:5432/helpdesk?table=faq'
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit, urlunsplit

from dupq.core.errors import DupqError

SCHEMES = ("postgresql://", "postgres://")
DEFAULT_TABLE = "dupq"
TABLE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,49}")  # quoted as an identifier; short enough for its suffixes


def is_postgres(location) -> bool:
    """Whether ``location`` (text) names a Postgres collection (``postgresql://...`` or ``postgres://...``)."""
    return isinstance(location, str) and location.startswith(SCHEMES)


@dataclass(frozen=True)
class Address:
    """Where a Postgres collection is: libpq's URI (with the password, if given), the table, and the text shown."""

    conninfo: str = field(repr=False)  # what libpq is given: never printed
    table: str
    text: str  # the address as written, its password replaced by ***
    password: str | None = field(default=None, repr=False)  # to scrub from a server's messages


def parse(location: str) -> Address:
    """A ``postgresql://USER@HOST:PORT/DB?table=NAME`` location, or a DupqError (never showing the password)."""
    try:
        parts = urlsplit(location)
        password = unquote(parts.password) if parts.password is not None else None
        parts.port  # noqa: B018 -- raises ValueError for a port that is not a number
    except ValueError:
        raise DupqError(
            f"the Postgres location {redact(location)} is not a valid address "
            "(postgresql://USER@HOST:PORT/DB?table=NAME)."
        ) from None
    settings = parse_qsl(parts.query, keep_blank_values=True)
    tables = [v for k, v in settings if k == "table"]
    table = tables[-1] if tables else DEFAULT_TABLE
    shown = redact(location)
    password = password or next((v for k, v in settings if k == "password"), None)
    if not TABLE.fullmatch(table):
        raise DupqError(
            f"the table name {table!r} in {shown} must be letters, digits and _ (at most 50, not starting with a digit)."
        )
    if not parts.path.strip("/") and not any(k == "dbname" for k, _ in settings):
        raise DupqError(f"the Postgres location {shown} names no database (postgresql://USER@HOST:PORT/DB?table=NAME).")
    rest = urlencode([(k, v) for k, v in settings if k != "table"], quote_via=quote)
    conninfo = urlunsplit((parts.scheme, parts.netloc, parts.path, rest, ""))
    return Address(conninfo, table, shown, password)


def redact(location: str) -> str:
    """``location`` with the password of its user part (``USER:PASSWORD@``), if any, replaced by ``***``."""
    scheme, sep, rest = location.partition("://")
    if not sep:
        return location
    netloc, slash, tail = rest.partition("/")
    user, at, hosts = netloc.rpartition("@")
    if at and ":" in user:
        netloc = f"{user.split(':', 1)[0]}:***@{hosts}"
    rest = netloc + slash + tail
    tail_settings = re.sub(r"(?i)([?&]password=)[^&]*", r"\1***", rest)  # libpq takes ?password= too
    return f"{scheme}{sep}{tail_settings}"


def scrub(message: str, address: Address) -> str:
    """A server's or libpq's ``message`` without the password (libpq never prints it; this makes sure)."""
    if address.password:
        message = message.replace(address.password, "***")
    return message
