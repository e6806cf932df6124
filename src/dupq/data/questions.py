"""Reading a list of questions to store, search for or deduplicate.

Five kinds of file, told apart by name and header (``.gz`` read transparently), each streamed
(:func:`stream_questions`): a **Quora pairs file** (every distinct question once, keyed by its qid), a **CSV/TSV file**
with a header (the ``--column``, default ``question``), **JSON lines**, **Parquet**, and otherwise a **text file**, one
question a line. A row's other fields are its metadata; ``--key-column`` names its key.

Every line is a question or a counted reason it was left out (``Questions.dropped``: blank, no words,
:func:`check_question`, wrong number of fields, an unclosed quote). A file that cannot be read as a whole is refused in
one sentence (not UTF-8, a line over the cap, a column named twice, a key given to two lines).
"""

from __future__ import annotations

import csv
import json
import os
from collections import Counter, deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from dupq.core.errors import DupqError
from dupq.core.files import check_path
from dupq.data.text import delimiter_of, header_names, open_text, reading
from dupq.data.tokenizer import STRIP

MAX_KEY = 200  # characters in a key (a question's id: a qid, an Idempotency-Key)
KEY_PATTERN = r"^[!-~]+$"  # printable ASCII without spaces: what a client can send back in a retry, as written


MAX_QUESTION = 1000  # characters in one question a user gives (the CLI, the library, the service alike)


def check_question(text: str, where: str = "the question", longest: int | None = MAX_QUESTION) -> str:
    """``text`` if it is a question dupq can encode, else a :class:`DupqError` naming ``where`` it came from.

    The one rule every entry point applies (the CLI, the library, the service): a question is valid Unicode (no
    undecodable bytes, which Python keeps as lone surrogates), at most :data:`MAX_QUESTION` characters long, and holds
    at least one word once punctuation and blanks are stripped. A question with no words would get the padding vector,
    so any two such "questions" ("???", "!!!", a control character) would look identical, with similarity 1.0.
    ``longest=None`` lifts the length rule, for questions a collection stored already (one stored before the rule is
    re-encoded whole, not refused).

    >>> check_question("???", "question 1")
    Traceback (most recent call last):
    dupq.core.errors.DupqError: question 1 has no words, only punctuation or blanks; give the text of the question.
    """
    if not isinstance(text, str):
        raise DupqError(f"{where} is a {type(text).__name__}, not text.")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise DupqError(f"{where} is not valid UTF-8 text (undecodable byte at character {e.start + 1}).") from None
    if not text.strip():
        raise DupqError(f"{where} is empty; give the text of the question.")
    if longest is not None and len(text) > longest:
        raise DupqError(f"{where} is {len(text):,} characters long; a question has at most {longest:,}.")
    if not text.translate(STRIP).split():
        raise DupqError(f"{where} has no words, only punctuation or blanks; give the text of the question.")
    return text


def check_questions(texts: Sequence[str], what: str = "question", longest: int | None = MAX_QUESTION) -> list[str]:
    """:func:`check_question` on each of ``texts`` (a list, not one string), naming ``what N``."""
    if isinstance(texts, str):
        raise DupqError(f"give a list of {what}s, not a single string.")
    texts = list(texts)
    for i, t in enumerate(texts):
        check_question(t, f"{what} {i + 1}", longest)
    return texts


@dataclass
class Dropped:
    """Rows a reader could not use: the count by reason, the physical lines they took, the first few ids."""

    reasons: Counter = field(default_factory=Counter)
    examples: list[str] = field(default_factory=list)  # "id (reason)", at most `keep`
    keep: int = 5
    lines: int = 0  # physical lines of the file in the dropped rows (a quoted field can span several)

    def add(self, row_id: str, reason: str, lines: int = 1) -> None:
        self.reasons[reason] += 1
        self.lines += lines
        if len(self.examples) < self.keep:
            self.examples.append(f"{row_id} ({reason})")

    @property
    def count(self) -> int:
        return sum(self.reasons.values())

    def _reasons(self) -> str:
        return ", ".join(f"{n} {reason}" for reason, n in self.reasons.most_common())

    def why(self) -> str:
        """The reasons and the first examples: ``"2 empty question; first: 105780 (empty question), ..."``."""
        return f"{self._reasons()}; first: {', '.join(self.examples)}"

    def __str__(self) -> str:
        if not self.count:
            return "no rows dropped"
        span = f" over {self.lines} lines" if self.lines != self.count else ""
        return f"dropped {self.count} unusable rows{span} ({self._reasons()}); first: {', '.join(self.examples)}"


def table_rows(
    f, delimiter: str, width: int, dropped: Dropped, first_line: int = 2
) -> Iterator[tuple[int, int, list[str]]]:
    """``(line, lines, row)`` for each row of ``width`` fields: its first physical line and how many it spans.

    Every line is accounted for: a row is yielded, or recorded in ``dropped`` with its reason (``blank line``, ``wrong
    number of fields``, ``unclosed quote``), by line number. The ``csv`` module lets a quoted field run over line ends,
    so a stray ``"`` would swallow every line up to the next quote (or the end of the file) into one row, and two stray
    quotes would even pair up into a row of the right width. So rows are read strictly (a closing quote must end its
    field), and a row that breaks that, or spans several lines with the wrong number of fields, is taken to be an
    unclosed quote: its first line is dropped and reading starts again on the line after it. A quoting slip within one
    line is read leniently, as before.
    """
    source, pushed_back = iter(f), deque()
    taken: list[str] = []  # the physical lines of the row being read

    def lines() -> Iterator[str]:
        while True:
            line = pushed_back.popleft() if pushed_back else next(source, None)
            if line is None:
                return
            taken.append(line)
            yield line

    number = first_line
    while True:
        try:
            for row in csv.reader(lines(), delimiter=delimiter, strict=True):
                span = len(taken)
                if len(row) == width:
                    yield number, span, row
                elif span > 1:
                    raise csv.Error("a quoted field ran over lines")
                else:
                    dropped.add(f"line {number}", "wrong number of fields" if row else "blank line")
                number += span
                taken.clear()
            return
        except csv.Error:
            first, rest = taken[0], taken[1:]
            taken.clear()
            pushed_back.extendleft(reversed(rest))
            # a slip within one line: read leniently
            row = [] if rest else next(csv.reader([first], delimiter=delimiter), [])
            if len(row) == width:
                yield number, 1, row
            else:
                dropped.add(f"line {number}", "unclosed quote" if rest or '"' in first else "wrong number of fields")
            number += 1


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


def is_key(key) -> bool:
    """Whether ``key`` passes :func:`check_key`."""
    try:
        check_key(key)
    except DupqError:
        return False
    return True


@dataclass
class Question:
    """One question as a streaming reader gives it."""

    text: str
    key: str | None  # the user's key (a Quora qid, the --key-column's value); None when the file has none
    metadata: dict | None  # the row's other columns (CSV/TSV, JSON lines, Parquet); None for a text file
    line: int  # where it is: the line (text, CSV/TSV, JSON lines) or row (Parquet, 1-based) it starts on


JSON_LINES = (".jsonl", ".ndjson")


def kind_of(path: Path) -> str:
    """How a questions file is read, from its name (``.gz`` aside): parquet, jsonl, table (CSV/TSV) or text."""
    suffixes = [x.lower() for x in path.suffixes if x.lower() != ".gz"]
    last = suffixes[-1] if suffixes else ""
    if last == ".parquet":
        return "parquet"
    if last in JSON_LINES:
        return "jsonl"
    return "table" if delimiter_of(path) is not None else "text"


def stream_questions(
    path: str | os.PathLike, column: str | None = None, key_column: str | None = None, dropped: Dropped | None = None
) -> Iterator[Question]:
    """The questions of ``path`` one by one, in memory that does not grow with the file: a text file (one a
    line), a CSV/TSV file with a header (or a Quora pairs file), JSON lines (one object a line) or Parquet
    (through pyarrow). ``column`` names the question's field (default ``question``), ``key_column`` its key's.

    Every line is accounted for: a question, or a reason in ``dropped``. Keys are not checked for
    repeats here (that needs memory): :func:`read_questions` does, and so does ``dupq dedup``."""
    path = check_path(path, "the questions file", folder=False)
    dropped = Dropped() if dropped is None else dropped
    kind = kind_of(path)
    if (column is not None or key_column is not None) and kind == "text":
        raise DupqError(
            f"--column and --key-column need a .csv, .tsv, .jsonl or .parquet file, but {path} is a text file."
        )
    if kind == "parquet":
        yield from _parquet(path, column or "question", key_column, dropped)
        return
    with reading(path, "JSON lines" if kind == "jsonl" else "CSV/TSV"), open_text(path) as f:
        if kind == "text":
            yield from _lines(f, dropped)
        elif kind == "jsonl":
            yield from _json_lines(f, path, column or "question", key_column, dropped)
        else:
            delimiter = delimiter_of(path)
            header = header_names(f.readline(), delimiter, path)
            rows = table_rows(f, delimiter, len(header), dropped)
            if column is None and {"qid1", "qid2", "question1", "question2"} <= set(header):
                yield from _pairs(rows, header, dropped)
            else:
                yield from _table(rows, header, column or "question", path, dropped, key_column)


def read_questions(path: str | os.PathLike, column: str | None = None, key_column: str | None = None) -> Questions:
    """Read the questions of ``path`` whole (see :func:`stream_questions` for the kinds of file).

    A key given to two lines is refused in one sentence (nothing is stored).

    >>> read_questions("archive.csv", column="title").texts[:1]   # doctest: +SKIP
    ['How do I learn Python fast?']
    """
    dropped = Dropped()
    texts, keys, metadata = [], [], []
    first: dict[str, int] = {}
    for q in stream_questions(path, column, key_column, dropped):
        if q.key is not None:
            if q.key in first:
                raise DupqError(
                    f"{path} gives the key {q.key!r} to lines {first[q.key]} and {q.line}; a key names one question, "
                    "so give each its own (nothing was stored)."
                )
            first[q.key] = q.line
        texts.append(q.text)
        keys.append(q.key)
        metadata.append(q.metadata)
    kind = kind_of(Path(path))
    has_keys = bool(first) or key_column is not None
    return Questions(
        texts,
        keys=keys if has_keys else None,
        metadata=metadata if any(metadata) else None,
        dropped=dropped,
        kind="pairs"
        if has_keys and key_column is None and kind == "table"
        else ("text" if kind == "text" else "table"),
    )


def _lines(f, dropped: Dropped) -> Iterator[Question]:
    for number, line in enumerate(f, 1):
        text = line.rstrip("\r\n")
        if not text.strip():
            dropped.add(f"line {number}", "blank line")
        elif _usable(text, f"line {number}", dropped):
            yield Question(text, None, None, number)


def _pairs(rows, header: list[str], dropped: Dropped) -> Iterator[Question]:
    col = {name: i for i, name in enumerate(header)}
    sides = [(col["qid1"], col["question1"]), (col["qid2"], col["question2"])]
    seen: set[str] = set()
    for number, lines, row in rows:
        for i_qid, i_text in sides:
            qid, text = row[i_qid], row[i_text]
            if qid in seen:
                continue
            seen.add(qid)
            if _usable(text, f"line {number}", dropped, lines):
                yield Question(text, qid, None, number)


def _missing(path: Path, names, columns: list[str]) -> None:
    for name, option in names:
        if name is not None and name not in columns:
            raise DupqError(
                f"{path} has no column {name!r} (its columns: {', '.join(columns) or 'none'}); name the column with {option}."
            )


def _table(
    rows, header: list[str], column: str, path: Path, dropped: Dropped, key_column: str | None = None
) -> Iterator[Question]:
    _missing(path, ((column, "--column"), (key_column, "--key-column")), header)
    i = header.index(column)
    k = header.index(key_column) if key_column is not None else None
    for number, lines, row in rows:
        if k is not None and not row[k].strip():
            dropped.add(f"line {number}", "empty key", lines)
        elif k is not None and not is_key(row[k]):
            dropped.add(f"line {number}", "key not printable ASCII or too long", lines)
        elif _usable(row[i], f"line {number}", dropped, lines):
            metadata = {name: value for j, (name, value) in enumerate(zip(header, row)) if j not in (i, k)}
            yield Question(row[i], row[k] if k is not None else None, metadata, number)


_JSON_TYPES = {bool: "boolean", list: "list", dict: "JSON object"}


def _record(obj: dict, column: str, key_column: str | None, where: str, dropped: Dropped) -> Question | None:
    """A JSON object or Parquet row as a question, or None with the reason in ``dropped``."""
    text, key = obj.get(column), obj.get(key_column) if key_column is not None else None
    if not isinstance(text, str):
        dropped.add(where, f"no text in {column!r}")
        return None
    if key_column is not None:
        if isinstance(key, (int, float)) and not isinstance(key, bool):
            key = str(key)
        if key is not None and not isinstance(key, str):  # true, a list, an object: no key a user gave as one
            dropped.add(where, f"key is a {_JSON_TYPES.get(type(key), type(key).__name__)}, not text or a number")
            return None
        if key is None or not key.strip():
            dropped.add(where, "empty key")
            return None
        if not is_key(key):
            dropped.add(where, "key not printable ASCII or too long")
            return None
    if not _usable(text, where, dropped):
        return None
    metadata = {name: value for name, value in obj.items() if name not in (column, key_column)}
    return Question(text, key, metadata, int(where.split()[-1]))


def _json_lines(f, path: Path, column: str, key_column: str | None, dropped: Dropped) -> Iterator[Question]:
    for number, line in enumerate(f, 1):
        if not line.strip():
            dropped.add(f"line {number}", "blank line")
            continue
        try:
            obj = json.loads(line)
        except (ValueError, RecursionError):
            dropped.add(f"line {number}", "not JSON")
            continue
        if not isinstance(obj, dict):
            dropped.add(f"line {number}", "not a JSON object")
            continue
        q = _record(obj, column, key_column, f"line {number}", dropped)
        if q is not None:
            yield q


def _parquet(path: Path, column: str, key_column: str | None, dropped: Dropped) -> Iterator[Question]:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise DupqError("reading Parquet needs pyarrow: pip install 'dupq[parquet]'.") from None
    try:
        f = pq.ParquetFile(path)
        _missing(path, ((column, "--column"), (key_column, "--key-column")), f.schema_arrow.names)
        row = 0
        for batch in f.iter_batches(batch_size=8192):
            for obj in batch.to_pylist():
                row += 1
                q = _record(obj, column, key_column, f"row {row}", dropped)
                if q is not None:
                    yield q
    except OSError as e:  # pyarrow's ArrowInvalid and ArrowIOError are OSErrors
        raise DupqError(f"{path} is not a readable Parquet file ({e}).") from None
