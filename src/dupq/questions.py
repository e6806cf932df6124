"""Reading a list of questions to store, search for or deduplicate.

Three kinds of file, told apart by their name and header (``.gz`` is read transparently):

* a **Quora pairs file** (a header with ``qid1, qid2, question1, question2``): every distinct
  question once, keyed by its qid, in order of first appearance (537,626 non-empty questions in
  the shared file);
* a **CSV/TSV file** with a header: the column ``--column`` names (default ``question``); the
  other columns of the row (an answer, a URL, ...) are kept as the question's metadata;
* anything else: a **text file**, one question a line.

Empty questions are skipped and counted, never stored.
"""

from __future__ import annotations

import csv
import os
from dataclasses import dataclass
from pathlib import Path

from dupq.data import open_text, reading
from dupq.files import DupqError


@dataclass
class Questions:
    """Questions read from a file, with an optional key (e.g. the Quora qid) and metadata each."""

    texts: list[str]
    keys: list[str] | None = None  # external ids, unique; None when the file has none
    metadata: list[dict] | None = None  # one dict per question; None when the file has none
    skipped: int = 0  # empty questions left out
    kind: str = "text"  # "text", "table" or "pairs": how the file was read

    def __len__(self) -> int:
        return len(self.texts)


def _table_delimiter(path: Path) -> str | None:
    name = path.name.removesuffix(".gz").lower()
    return "\t" if name.endswith(".tsv") else "," if name.endswith(".csv") else None


def read_questions(path: str | os.PathLike, column: str | None = None) -> Questions:
    """Read the questions of ``path`` (see the module docstring for the three kinds of file).

    >>> read_questions("archive.csv", column="title").texts[:1]   # doctest: +SKIP
    ['How do I learn Python fast?']
    """
    path = Path(path)
    if not path.is_file():
        raise DupqError(f"the questions file {path} does not exist.")
    delimiter = _table_delimiter(path)
    if column is not None and delimiter is None:
        raise DupqError(f"--column needs a .csv or .tsv file, but {path} is neither.")
    with reading(path), open_text(path) as f:
        if delimiter is None:
            return _read_lines(f)
        rows = csv.reader(f, delimiter=delimiter)
        header = [h.strip().lstrip("\ufeff") for h in next(rows, [])]
        if column is None and {"qid1", "qid2", "question1", "question2"} <= set(header):
            return _read_pairs(rows, header)
        return _read_table(rows, header, column or "question", path)


def _read_lines(f) -> Questions:
    texts, skipped = [], 0
    for line in f:
        text = line.rstrip("\r\n")
        if text.strip():
            texts.append(text)
        else:
            skipped += 1
    return Questions(texts, skipped=skipped, kind="text")


def _read_pairs(rows, header: list[str]) -> Questions:
    col = {name: i for i, name in enumerate(header)}
    sides = [(col["qid1"], col["question1"]), (col["qid2"], col["question2"])]
    seen: set[str] = set()
    texts, keys, skipped = [], [], 0
    for row in rows:
        if len(row) != len(header):
            skipped += 1
            continue
        for i_qid, i_text in sides:
            qid, text = row[i_qid], row[i_text]
            if qid in seen:
                continue
            seen.add(qid)
            if text.strip():
                texts.append(text)
                keys.append(qid)
            else:
                skipped += 1
    return Questions(texts, keys=keys, skipped=skipped, kind="pairs")


def _read_table(rows, header: list[str], column: str, path: Path) -> Questions:
    if column not in header:
        raise DupqError(
            f"{path} has no column {column!r} (its columns: {', '.join(header) or 'none'}); "
            "name the question column with --column."
        )
    i = header.index(column)
    texts, metadata, skipped = [], [], 0
    for row in rows:
        if len(row) != len(header) or not row[i].strip():
            skipped += 1
            continue
        texts.append(row[i])
        metadata.append({name: value for j, (name, value) in enumerate(zip(header, row)) if j != i})
    has_metadata = any(metadata)
    return Questions(texts, metadata=metadata if has_metadata else None, skipped=skipped, kind="table")
