"""Reading a list of questions to store, search for or deduplicate.

Three kinds of file, told apart by their name and header (``.gz`` is read transparently):

* a **Quora pairs file** (a header with ``qid1, qid2, question1, question2``): every distinct
  question once, keyed by its qid, in order of first appearance (537,617 questions with words in
  the shared file);
* a **CSV/TSV file** with a header: the column ``--column`` names (default ``question``); the
  other columns of the row (an answer, a URL, ...) are kept as the question's metadata;
* anything else: a **text file**, one question a line.

Every line is accounted for: a question, or a reason it was left out (a blank line, an empty
question, one with no words (see :func:`dupq.data.tokenizer.check_question`), a row with the wrong
number of fields or an unclosed quote), counted in ``Questions.dropped``; none is stored. A file
that cannot be read as a whole is refused in one sentence: not UTF-8, a line over the cap, a header
naming a column twice (:mod:`dupq.data.text`), or a key given to two lines.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from dupq.core.files import DupqError, check_path
from dupq.data.pairs import Dropped, delimiter_of, table_rows
from dupq.data.text import header_names, open_text, reading
from dupq.data.tokenizer import MAX_QUESTION, check_question

MAX_KEY = 200  # characters in a key (a question's id: a qid, an Idempotency-Key)
KEY_PATTERN = r"^[!-~]+$"  # printable ASCII without spaces: what a client can send back in a retry, as written


def check_key(key, where: str = "the key") -> str:
    """``key`` if it is a key dupq stores, else a :class:`DupqError` naming ``where`` it came from.

    The one rule of a key in every entry point (``index add --key``, a file's key column,
    ``Collection.add``, the service's ``key``): 1 to :data:`MAX_KEY` characters of printable
    ASCII, no spaces, so that any client can send it again, byte for byte, in a retry.
    """
    if not isinstance(key, str) or not key.strip():
        raise DupqError(f"{where} must be a non-empty string, not {key!r}.")
    if len(key) > MAX_KEY:
        raise DupqError(f"{where} is {len(key):,} characters long; a key has at most {MAX_KEY}.")
    if not all("!" <= c <= "~" for c in key):
        raise DupqError(f"{where} {key!r} holds a space or a character that is not printable ASCII; a key may not.")
    return key


@dataclass
class Questions:
    """Questions read from a file, with an optional key (e.g. the Quora qid) and metadata each."""

    texts: list[str]
    keys: list[str] | None = None  # external ids, unique; None when the file has none
    metadata: list[dict] | None = None  # one dict per question; None when the file has none
    dropped: Dropped = field(default_factory=Dropped)  # what was left out, by reason and line
    kind: str = "text"  # "text", "table" or "pairs": how the file was read

    def __len__(self) -> int:
        return len(self.texts)

    @property
    def skipped(self) -> int:
        return self.dropped.count


def _usable(text: str, where: str, dropped: Dropped, lines: int = 1) -> bool:
    """True for a question :func:`check_question` accepts; otherwise the reason goes into ``dropped``."""
    try:
        check_question(text)
    except DupqError:
        reason = (
            "empty question" if not text.strip() else "question too long" if len(text) > MAX_QUESTION else "no words"
        )
        dropped.add(where, reason, lines)
        return False
    return True


def _valid_key(key: str) -> bool:
    try:
        check_key(key)
    except DupqError:
        return False
    return True


def read_questions(path: str | os.PathLike, column: str | None = None, key_column: str | None = None) -> Questions:
    """Read the questions of ``path`` (see the module docstring for the three kinds of file).

    Every line is accounted for: a question, or a reason in ``Questions.dropped`` (blank line,
    empty question, no words, wrong number of fields, unclosed quote). ``key_column`` names the
    column of a CSV/TSV file that holds each question's key (its id; a Quora file's are its qids).

    >>> read_questions("archive.csv", column="title").texts[:1]   # doctest: +SKIP
    ['How do I learn Python fast?']
    """
    path = check_path(path, "the questions file", folder=False)
    delimiter = delimiter_of(path)
    if (column is not None or key_column is not None) and delimiter is None:
        raise DupqError(f"--column and --key-column need a .csv or .tsv file, but {path} is neither.")
    with reading(path), open_text(path) as f:
        if delimiter is None:
            return _read_lines(f)
        header = header_names(f.readline(), delimiter, path)
        rows = table_rows(f, delimiter, len(header), dropped := Dropped())
        if column is None and {"qid1", "qid2", "question1", "question2"} <= set(header):
            return _read_pairs(rows, header, dropped)
        return _read_table(rows, header, column or "question", path, dropped, key_column)


def _read_lines(f) -> Questions:
    texts, dropped = [], Dropped()
    for number, line in enumerate(f, 1):
        text = line.rstrip("\r\n")
        if not text.strip():
            dropped.add(f"line {number}", "blank line")
        elif _usable(text, f"line {number}", dropped):
            texts.append(text)
    return Questions(texts, dropped=dropped, kind="text")


def _read_pairs(rows, header: list[str], dropped: Dropped) -> Questions:
    col = {name: i for i, name in enumerate(header)}
    sides = [(col["qid1"], col["question1"]), (col["qid2"], col["question2"])]
    seen: set[str] = set()
    texts, keys = [], []
    for number, lines, row in rows:
        for i_qid, i_text in sides:
            qid, text = row[i_qid], row[i_text]
            if qid in seen:
                continue
            seen.add(qid)
            if _usable(text, f"line {number}", dropped, lines):
                texts.append(text)
                keys.append(qid)
    return Questions(texts, keys=keys, dropped=dropped, kind="pairs")


def _read_table(
    rows, header: list[str], column: str, path: Path, dropped: Dropped, key_column: str | None = None
) -> Questions:
    for name, option in ((column, "--column"), (key_column, "--key-column")):
        if name is not None and name not in header:
            raise DupqError(
                f"{path} has no column {name!r} (its columns: {', '.join(header) or 'none'}); name the column with {option}."
            )
    i = header.index(column)
    k = header.index(key_column) if key_column is not None else None
    texts, metadata, keys = [], [], []
    first: dict[str, int] = {}  # each key's line
    for number, lines, row in rows:
        if k is not None and not row[k].strip():
            dropped.add(f"line {number}", "empty key", lines)
        elif k is not None and not _valid_key(row[k]):
            dropped.add(f"line {number}", "key not printable ASCII or too long", lines)
        elif k is not None and row[k] in first:
            raise DupqError(
                f"{path} gives the key {row[k]!r} to lines {first[row[k]]} and {number}; a key names one question, "
                "so give each its own (nothing was stored)."
            )
        elif _usable(row[i], f"line {number}", dropped, lines):
            if k is not None:
                first[row[k]] = number
            texts.append(row[i])
            metadata.append({name: value for j, (name, value) in enumerate(zip(header, row)) if j not in (i, k)})
            keys.append(row[k] if k is not None else None)
    has_metadata = any(metadata)
    return Questions(
        texts,
        keys=keys if k is not None else None,
        metadata=metadata if has_metadata else None,
        dropped=dropped,
        kind="table",
    )
