"""Reading question-pair files and cutting them into the seed's splits.

The Quora Question Pairs file (``id, qid1, qid2, question1, question2, is_duplicate``) is read
with the ``csv`` module so that every text stays exactly as written: no ``NaN`` for an empty
cell or for the literal text ``n/a``. Rows that cannot be used (an empty question, a label that
is not 0 or 1, a broken row) are dropped and *reported*: how many, why, and the first few ids.

The split is the seed recipe's, by row position in the file, so it is the same everywhere:

* rows ``[0, train_pool)``: the training pool; only its duplicate pairs are trained on,
  the first ``1 - val_fraction`` of them for training and the rest for the validation loss;
* the next ``test`` rows: the test pairs (both labels), only ever reported on;
* the next ``dev`` rows: the dev pairs (both labels), used to choose a threshold.

On the shared file this gives 111,473 duplicates in the pool, cut into 89,178 train and 22,295
validation pairs (another copy of the data, with 13 more duplicates, gives 111,486 / 89,188).
"""

from __future__ import annotations

import csv
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dupq.core.errors import DupqError
from dupq.core.files import atomic_output
from dupq.core.options import check_options, option
from dupq.data.questions import Dropped, table_rows
from dupq.data.text import delimiter_of, header_names, open_text, reading

REQUIRED_COLUMNS = ("question1", "question2", "is_duplicate")
DEFAULT_DATA = Path("..") / "shared" / "data" / "quora_duplicate_questions.tsv.gz"
DATA_HELP = (
    "pass --data PATH or set DUPQ_DATA to the Quora Question Pairs file (quora_duplicate_questions.tsv, gzipped or not)"
)


@dataclass
class Pairs:
    """Question pairs, column-wise. ``rows`` are positions in the source file (0-based: row r is line r + 2)."""

    ids: list[str]
    q1: list[str]
    q2: list[str]
    labels: np.ndarray  # (N,) int8, 1 = duplicate
    rows: np.ndarray  # (N,) int64

    def __len__(self) -> int:
        return len(self.q1)

    def take(self, index: np.ndarray) -> Pairs:
        """The pairs at ``index`` (an integer array or a boolean mask), in that order."""
        index = np.flatnonzero(index) if index.dtype == bool else index
        ids, q1, q2 = ([column[i] for i in index] for column in (self.ids, self.q1, self.q2))
        return Pairs(ids=ids, q1=q1, q2=q2, labels=self.labels[index], rows=self.rows[index])


def default_data_path() -> Path:
    """``$DUPQ_DATA`` if set, else ``../shared/data/quora_duplicate_questions.tsv.gz``."""
    env = os.environ.get("DUPQ_DATA")
    return Path(env) if env else DEFAULT_DATA


def read_pairs(path: str | os.PathLike) -> tuple[Pairs, Dropped]:
    """Read a question-pairs file (``.tsv``/``.csv``, optionally ``.gz``).

    The header must name ``question1``, ``question2`` and ``is_duplicate``; ``id`` is optional
    (the row number stands in). Returns the usable pairs and a report of the dropped rows.

    >>> pairs, dropped = read_pairs("quora_duplicate_questions.tsv.gz")  # doctest: +SKIP
    >>> len(pairs), dropped.count                                          # doctest: +SKIP
    (403999, 2)
    """
    path = Path(path)
    if not path.is_file():
        raise DupqError(f"data file {path} does not exist; {DATA_HELP}.")
    ids, q1, q2, labels, rows = [], [], [], [], []
    dropped = Dropped()
    with reading(path), open_text(path) as f:
        header_line = f.readline()
        delimiter = delimiter_of(path) or ("\t" if "\t" in header_line else ",")  # the name's, else the header's
        header = header_names(header_line, delimiter, path)
        missing = [c for c in REQUIRED_COLUMNS if c not in header]
        if missing:
            raise DupqError(
                f"{path} lacks the column(s) {', '.join(missing)}: a pairs file needs a header "
                f"with question1, question2 and is_duplicate (found: {', '.join(header) or 'nothing'})."
            )
        col = {name: header.index(name) for name in header}
        i_q1, i_q2, i_y = col["question1"], col["question2"], col["is_duplicate"]
        i_id = col.get("id")
        for line, lines, row in table_rows(f, delimiter, len(header), dropped):
            position = line - 2  # the row's place in the file: line 2 (after the header) is row 0
            row_id = row[i_id] if i_id is not None else str(position)
            if not row[i_q1].strip() or not row[i_q2].strip():
                dropped.add(row_id, "empty question", lines)
            elif row[i_y].strip() not in ("0", "1"):
                dropped.add(row_id, "label not 0 or 1", lines)
            else:
                ids.append(row_id)
                q1.append(row[i_q1])
                q2.append(row[i_q2])
                labels.append(row[i_y].strip() == "1")
                rows.append(position)
    if not q1:
        raise DupqError(f"{path} holds no usable question pairs ({dropped}).")
    pairs = Pairs(ids, q1, q2, np.asarray(labels, dtype=np.int8), np.asarray(rows, dtype=np.int64))
    return pairs, dropped


# The seed's 10,240 rows: its test pairs, its dev pairs, and the labelled recipe's validation rows.
HELD_OUT_ROWS = 10_240


@dataclass
class SplitConfig:
    """Sizes of the seed split, in rows of the source file: the split options of every command that cuts the data."""

    train_pool: int = option(
        300_000, "Rows at the top of the file that form the training pool (its pairs are the training data).", min=0
    )
    test: int = option(
        HELD_OUT_ROWS,
        "Rows after the pool kept as test pairs (reported on, never tuned on, never taught).",
        min=0,
        flag="--test-size",
    )
    dev: int = option(
        HELD_OUT_ROWS,
        "Rows after the test pairs kept as dev pairs (where the threshold is chosen; never taught).",
        min=0,
        flag="--dev-size",
    )
    val_fraction: float = option(
        0.2,
        "Training on duplicates: share of the pool's duplicates held out for validation.",
        min=0.0,
        max=1.0,
        cli=False,
    )
    labelled_val: int = option(
        HELD_OUT_ROWS,
        "Training on labelled pairs: last rows of the pool (both labels) held out for validation, never trained on.",
        min=2,
    )

    def __post_init__(self) -> None:
        check_options(self)


@dataclass
class Splits:
    train: Pairs  # duplicates of the pool, head (1 - val_fraction)
    val: Pairs  # duplicates of the pool, tail val_fraction
    test: Pairs  # labelled pairs, both classes
    dev: Pairs  # labelled pairs, both classes
    pool: Pairs  # every usable pair of the training pool (vocabulary, explicit negatives)


def write_pairs(path: str | os.PathLike, pairs) -> None:
    """Write ``(qid1, qid2, question1, question2, is_duplicate)`` rows as a tab-separated file in the
    Quora file's columns (``id`` numbered from 0), atomically, for :func:`read_pairs` to read back whole.

    The ``csv`` module quotes a field holding a line feed but not one holding a bare carriage
    return, which every reader takes for a line end; a row with one is written quoted throughout.
    """
    import io

    text = io.StringIO()
    plain = csv.writer(text, delimiter="\t", lineterminator="\n")
    quoted = csv.writer(text, delimiter="\t", lineterminator="\n", quoting=csv.QUOTE_ALL)
    plain.writerow(["id", "qid1", "qid2", "question1", "question2", "is_duplicate"])
    for i, row in enumerate(pairs):
        (quoted if any("\r" in str(value) for value in row) else plain).writerow((i, *row))
    with atomic_output(path) as f:
        f.write(text.getvalue().encode("utf-8"))


def split_pairs(pairs: Pairs, config: SplitConfig | None = None) -> Splits:
    """Cut pairs into the seed's train / val / test / dev splits by file row position."""
    c = config or SplitConfig()
    if min(c.train_pool, c.test, c.dev) < 0 or not 0 < c.val_fraction < 1:
        raise DupqError("split sizes must be non-negative and val_fraction strictly between 0 and 1.")
    n_rows = int(pairs.rows.max()) + 1
    need = c.train_pool + c.test + c.dev
    if n_rows < need:
        raise DupqError(
            f"the data has {n_rows} rows but the split needs {need} "
            f"(train pool {c.train_pool} + test {c.test} + dev {c.dev}); choose smaller sizes."
        )
    r = pairs.rows
    pool = pairs.take(r < c.train_pool)
    test = pairs.take((r >= c.train_pool) & (r < c.train_pool + c.test))
    dev = pairs.take((r >= c.train_pool + c.test) & (r < need))
    duplicates = pool.take(pool.labels == 1)
    cut = int(len(duplicates) * (1 - c.val_fraction))
    if cut < 2 or len(duplicates) - cut < 2:
        raise DupqError(f"the training pool holds {len(duplicates)} duplicate pairs, too few to train and validate on.")
    every = np.arange(len(duplicates))
    return Splits(train=duplicates.take(every[:cut]), val=duplicates.take(every[cut:]), test=test, dev=dev, pool=pool)


def recorded_split(metrics: dict[str, Any]) -> SplitConfig:
    """The split a model was trained with, as ``dupq train`` records it in its metrics.json
    (``training.split``), else the seed split."""
    recorded = metrics.get("training", {}).get("split")
    if not isinstance(recorded, dict):
        return SplitConfig()
    try:
        return SplitConfig(**recorded)
    except TypeError:
        raise DupqError(f"the model's metrics record an unknown split {recorded}.") from None


def held_out(metrics: dict[str, Any], data: str | os.PathLike) -> Splits:
    """Read ``data`` and cut it as the model with these ``metrics`` was trained: its test and dev pairs are unseen."""
    pairs, _ = read_pairs(data)
    return split_pairs(pairs, recorded_split(metrics))


def labelled_split(pool: Pairs, val_rows: int) -> tuple[Pairs, Pairs]:
    """The labelled recipe's cut of the training pool: ``(train, val)``, both labels in each.

    The last ``val_rows`` rows of the pool (by file position) are held out to validate on: they
    choose the best epoch; test and dev pairs choose nothing but the threshold.
    """
    if len(pool) == 0:
        raise DupqError("the training pool is empty.")
    cut = int(pool.rows.max()) + 1 - val_rows
    train, val = pool.take(pool.rows < cut), pool.take(pool.rows >= cut)
    for name, part in (("training", train), ("validation", val)):
        if len(part) < 2 or part.labels.min() == part.labels.max():
            raise DupqError(
                f"the labelled {name} pairs need both labels and at least 2 pairs "
                f"(the pool has {len(pool)} pairs, {val_rows} rows held out for validation); change the split sizes."
            )
    return train, val
