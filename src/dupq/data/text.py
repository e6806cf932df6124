"""Where the bytes of a user's file become lines: the one reader every text input goes through.

Every file a user hands dupq (a pairs file to train on, questions to store, search or deduplicate,
a ``predict --pairs`` stream) is opened here, so three rules hold for all of them at once:

* a UTF-8 **byte-order mark** at the start of the file (Excel and Notepad write one) is dropped, not
  read as the first question's first character (``"\\ufeffHow do I ..."`` would encode differently);
* a **line** may hold at most :data:`MAX_LINE_BYTES` bytes: a file without line ends (``/dev/zero``,
  a binary file) is refused at its first overlong line, with its number, instead of being read into
  memory until it runs out;
* a **header** may not name a column twice (``question,tag,tag`` would keep one ``tag`` and drop the other).

>>> with open_text(Path("questions.csv")) as f:                         # doctest: +SKIP
...     header = header_names(f.readline(), ",", Path("questions.csv"))
"""

from __future__ import annotations

import codecs
import csv
import gzip
import io
import sys
import zlib
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from dupq.core.errors import DupqError

MAX_LINE_BYTES = 1 << 20  # 1 MiB: the longest line (without its line end) any input file may hold
BOM = codecs.BOM_UTF8


class _CheckedBytes(io.RawIOBase):
    """A byte stream less its leading byte-order mark that raises :class:`DupqError` at a line over the cap.

    It counts the bytes since the last ``\\n`` as they pass, so no reader above it (a text wrapper,
    ``csv``, a line iterator) ever holds more than :data:`MAX_LINE_BYTES` of one line.
    """

    def __init__(self, source: BinaryIO, name: str, limit: int = MAX_LINE_BYTES):
        self._source, self._name, self._limit = source, name, limit
        self._line = 1  # the number of the line being read
        self._run = 0  # its bytes so far
        self._first = True

    def readable(self) -> bool:
        return True

    def _read(self, n: int) -> bytes:
        # read1: what is there, without waiting for n bytes (a pipe's lines arrive one at a time)
        return self._source.read1(n) if hasattr(self._source, "read1") else self._source.read(n)

    def readinto(self, buffer) -> int:
        data = self._read(len(buffer))
        if self._first:
            while data and len(data) < len(BOM) and BOM.startswith(data):  # a mark may arrive in pieces
                more = self._read(len(buffer) - len(data))
                if not more:
                    break
                data += more
            self._first = False
            if data.startswith(BOM):
                data = data[len(BOM) :] or self._read(len(buffer))
        self._check(data)
        buffer[: len(data)] = data
        return len(data)

    def _check(self, data: bytes) -> None:
        end = data.find(b"\n")
        if end < 0:
            self._run += len(data)
        else:
            self._too_long(self._run + end)
            last = data.rfind(b"\n")
            while end < last and last - end - 1 > self._limit:  # a whole line inside this chunk may be too long
                after = data.find(b"\n", end + 1)
                self._line += 1
                self._too_long(after - end - 1)
                end = after
            self._line += data.count(b"\n", end)
            self._run = len(data) - last - 1
        self._too_long(self._run)

    def _too_long(self, length: int) -> None:
        if length > self._limit:
            raise DupqError(
                f"line {self._line:,} of {self._name} is longer than {self._limit:,} bytes, the most a line may hold "
                "(is it a text file with one question or row a line?)."
            )

    def close(self) -> None:
        if not self.closed:
            self._source.close()
        super().close()


def open_text(path: Path):
    """Open a UTF-8 text file for the ``csv`` module (gunzipping a ``.gz`` on the fly), through the checks above."""
    source = gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")
    checked = io.BufferedReader(_CheckedBytes(source, str(path)), buffer_size=1 << 16)
    return io.TextIOWrapper(checked, encoding="utf-8", newline="")


def open_lines(path: str) -> io.BufferedReader:
    """Lines of bytes from ``path`` (``-``: standard input), through the checks above; iterate it line by line."""
    source = sys.stdin.buffer if path == "-" else open(path, "rb")
    return io.BufferedReader(_CheckedBytes(source, "standard input" if path == "-" else path))


@contextmanager
def reading(path: Path, kind: str = "CSV/TSV"):
    """Turn the ways a text table can be unreadable into one :class:`DupqError` naming ``path``."""
    csv.field_size_limit(sys.maxsize)
    try:
        yield
    except UnicodeDecodeError as e:
        raise DupqError(f"{path} is not UTF-8 text (byte {e.start} of a chunk cannot be decoded).") from None
    except (gzip.BadGzipFile, EOFError, zlib.error) as e:
        raise DupqError(f"{path} is not a readable gzip file ({e}).") from None
    except csv.Error as e:
        raise DupqError(f"{path} is not a well-formed {kind} file ({e}).") from None


def header_names(line: str, delimiter: str, path: Path) -> list[str]:
    """The column names of a header line, stripped; a name given twice is refused (one would be lost)."""
    names = [name.strip() for name in next(csv.reader([line], delimiter=delimiter), [])]
    first: dict[str, int] = {}
    for i, name in enumerate(names):
        if name in first:
            raise DupqError(
                f"the header of {path} names the column {name!r} twice (columns {first[name] + 1} and {i + 1}); "
                "give each column its own name."
            )
        first[name] = i
    return names


def delimiter_of(path: Path) -> str | None:
    """The field delimiter a file's name promises (``.tsv``, ``.csv``, gzipped or not), None for any other name."""
    name = path.name.removesuffix(".gz").lower()
    return "\t" if name.endswith(".tsv") else "," if name.endswith(".csv") else None
