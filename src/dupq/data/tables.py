"""Writing rows of results as a stream: CSV, JSON lines, a JSON array or Parquet, told apart by the file's name.

Results that grow with the input (``dupq dedup``'s one row per member of a group) are written a batch at a time, so they
never have to fit in memory: :class:`RowWriter` takes lists of rows (dicts with the same keys, in column order) and
writes them to an open binary file, which the caller makes atomic (:func:`dupq.core.files.atomic_output`). A CSV cell a
spreadsheet would run as a formula is made inert (:func:`inert`), except in the columns named ``verbatim``: an
identifier that a program joins back on (a key such as ``-5``, ``+44`` or ``@user``) must come back as it was written.

>>> import io
>>> buffer = io.BytesIO()
>>> with RowWriter(buffer, "csv", ["a", "b"]) as w:
...     w.write([{"a": 1, "b": "=x"}])
>>> buffer.getvalue().decode()
"a,b\\r\\n1,'=x\\r\\n"
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import BinaryIO

from dupq.core.errors import DupqError

FORMATS = {".csv": "csv", ".jsonl": "jsonl", ".json": "json", ".parquet": "parquet"}
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")  # what makes a spreadsheet read a cell as a formula


def inert(cell: str) -> str:
    """A user's text as a CSV cell that a spreadsheet shows and never runs: one starting with ``=``, ``+``,
    ``-``, ``@``, a tab or a carriage return gets a leading ``'`` (OWASP's advice against CSV injection).

    >>> inert("=HYPERLINK(A1)"), inert("How do I -x?")
    ("'=HYPERLINK(A1)", 'How do I -x?')
    """
    return "'" + cell if cell.startswith(FORMULA_STARTS) else cell


def format_of(path: Path) -> str:
    """``csv``, ``jsonl``, ``json`` or ``parquet`` from the file's suffix; another suffix is refused in one sentence."""
    kind = FORMATS.get(path.suffix.lower())
    if kind is None:
        raise DupqError(f"--out must end in .csv, .jsonl, .json or .parquet, not {path.name!r}.")
    if kind == "parquet":
        try:
            import pyarrow  # noqa: F401
        except ImportError:
            raise DupqError("writing Parquet needs pyarrow: pip install 'dupq[parquet]'.") from None
    return kind


class RowWriter:
    """Rows written to ``f`` in ``kind``'s format, a batch at a time; ``columns`` fixes their order. In a CSV every
    text cell is made :func:`inert` but those of the ``verbatim`` columns (identifiers, which must round-trip)."""

    def __init__(self, f: BinaryIO, kind: str, columns: list[str], verbatim: set[str] | frozenset[str] = frozenset()):
        self.f, self.kind, self.columns = f, kind, columns
        self._guarded = [c not in verbatim for c in columns]
        self._parquet, self._rows = None, 0
        if kind == "csv":
            self._text = io.TextIOWrapper(f, encoding="utf-8", newline="", write_through=True)
            self._csv = csv.writer(self._text)
            self._csv.writerow(columns)

    def write(self, rows: list[dict]) -> None:
        if not rows:
            return
        if self.kind == "csv":
            self._csv.writerows(
                [
                    [inert(v) if guard and isinstance(v, str) else v for v, guard in zip(row.values(), self._guarded)]
                    for row in rows
                ]
            )
        elif self.kind in ("jsonl", "json"):
            lead = b"[\n" if self.kind == "json" and not self._rows else b",\n" if self.kind == "json" else b""
            sep = ",\n" if self.kind == "json" else "\n"
            body = sep.join(json.dumps(r, ensure_ascii=False) for r in rows) + ("" if self.kind == "json" else "\n")
            self.f.write(lead + body.encode("utf-8"))
        else:
            import pyarrow as pa
            import pyarrow.parquet as pq

            table = pa.Table.from_pylist(rows)
            if self._parquet is None:
                self._parquet = pq.ParquetWriter(self.f, table.schema)
            self._parquet.write_table(table.cast(self._parquet.schema))
        self._rows += len(rows)

    def close(self) -> None:
        if self.kind == "json":
            self.f.write(b"\n]\n" if self._rows else b"[]\n")
        elif self.kind == "csv":
            self._text.flush()
            self._text.detach()
        elif self.kind == "parquet":
            if self._parquet is None:  # no rows: still a Parquet file with the columns
                import pyarrow as pa
                import pyarrow.parquet as pq

                self._parquet = pq.ParquetWriter(self.f, pa.schema([(c, pa.string()) for c in self.columns]))
            self._parquet.close()

    def __enter__(self) -> RowWriter:
        return self

    def __exit__(self, *exc) -> None:
        if exc[0] is None:
            self.close()
