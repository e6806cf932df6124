"""The pairs reader and the seed split: on synthetic files, and the exact figures of the real Quora file."""

from __future__ import annotations

import csv
import gzip
import random
from collections import Counter
from dataclasses import asdict

import numpy as np
import pytest

from dupq.core.errors import DupqError
from dupq.data.pairs import SplitConfig, held_out, read_pairs, split_pairs
from dupq.data.questions import read_questions
from support.synthetic import EMPTY_ROWS, NA_ROW, SMALL_SPLIT, SYNTHETIC_ROWS, make_rows


def test_reads_the_synthetic_file_exactly(pairs_path, synthetic_pairs):
    """Every row the generator wrote, with its quirks: the empty questions dropped and named, "n/a" kept as text."""
    written = make_rows(SYNTHETIC_ROWS)
    pairs, dropped = read_pairs(pairs_path)
    kept = [r for r in written if r.id not in EMPTY_ROWS]
    assert pairs.ids == [str(r.id) for r in kept] and pairs.rows.tolist() == [r.id for r in kept]
    assert pairs.q1 == [r.question1 for r in kept] and pairs.q2 == [r.question2 for r in kept]
    assert pairs.labels.tolist() == [r.is_duplicate for r in kept]
    assert dropped.reasons == {"empty question": len(EMPTY_ROWS)}
    assert [e.split()[0] for e in dropped.examples] == [str(i) for i in EMPTY_ROWS]
    assert pairs.q1[pairs.ids.index(str(NA_ROW))] == "n/a"  # kept as text, not NaN
    assert any('"' in q for q in pairs.q1)  # quoted fields come back unquoted
    assert synthetic_pairs.q1 == pairs.q1


@pytest.mark.real_data
def test_reads_the_shared_file_exactly(all_pairs, data_path):
    """The real file's figures: its row count, its two rows with an empty question, its duplicates, "n/a"."""
    pairs, dropped = read_pairs(data_path)
    assert len(pairs) == 404_001 - 2
    assert dropped.count == 2 and [e.split()[0] for e in dropped.examples] == ["105780", "201841"]
    assert int(pairs.labels.sum()) == 149_171  # both dropped rows are non-duplicates
    i = pairs.ids.index("363362")
    assert pairs.q1[i] == "n/a"  # kept as text, not NaN


def test_take_picks_each_column_at_the_index_in_its_order(synthetic_pairs):
    """``Pairs.take`` by an index array and by a mask, against a loop over the rows it names."""
    index = np.array([7, 2, 2, 40, 0])
    mask = synthetic_pairs.labels == 1
    for picked, rows in ((synthetic_pairs.take(index), index), (synthetic_pairs.take(mask), np.flatnonzero(mask))):
        expected = [
            (
                synthetic_pairs.ids[i],
                synthetic_pairs.q1[i],
                synthetic_pairs.q2[i],
                synthetic_pairs.labels[i],
                synthetic_pairs.rows[i],
            )
            for i in rows
        ]
        assert list(zip(picked.ids, picked.q1, picked.q2, picked.labels, picked.rows)) == expected


@pytest.mark.real_data
def test_seed_split_sizes(all_pairs):
    """The seed recipe's split sizes on the real file, as docs/train.md and src/dupq/data/pairs.py give them."""
    splits = split_pairs(all_pairs)
    assert (len(splits.train), len(splits.val)) == (89_178, 22_295)
    assert len(splits.train) + len(splits.val) == 111_473
    assert (len(splits.test), len(splits.dev)) == (10_240, 10_240)
    assert int(splits.test.labels.sum()) == 3_856
    assert 0 < int(splits.dev.labels.sum()) < len(splits.dev)  # both classes
    assert splits.train.labels.all() and splits.val.labels.all()
    assert splits.test.rows.min() == 300_000 and splits.dev.rows.min() == 310_240
    assert splits.train.rows.max() < splits.val.rows.min()  # head/tail cut, as the seed does


def test_split_matches_a_count_of_the_written_rows(synthetic_pairs):
    """The seed split of the small synthetic file, against the rows the generator wrote, counted plainly."""
    splits = split_pairs(synthetic_pairs.take(synthetic_pairs.rows < 24_000), SMALL_SPLIT)
    written = [r for r in make_rows(24_000) if r.id not in EMPTY_ROWS]
    pool_duplicates = [r.id for r in written if r.id < 20_000 and r.is_duplicate]
    cut = int(len(pool_duplicates) * (1 - SMALL_SPLIT.val_fraction))
    assert splits.train.rows.tolist() == pool_duplicates[:cut] and splits.val.rows.tolist() == pool_duplicates[cut:]
    assert splits.pool.rows.tolist() == [r.id for r in written if r.id < 20_000]
    assert splits.test.rows.tolist() == [r.id for r in written if 20_000 <= r.id < 22_000]
    assert splits.dev.rows.tolist() == [r.id for r in written if 22_000 <= r.id < 24_000]
    assert int(splits.test.labels.sum()) == sum(r.is_duplicate for r in written if 20_000 <= r.id < 22_000)
    assert 0 < int(splits.dev.labels.sum()) < len(splits.dev)  # both classes


def _rows(pairs, n: int) -> list[list]:
    """The first ``n`` pairs as rows of the Quora file's columns (the question ids 0)."""
    return [[pairs.ids[i], 0, 0, pairs.q1[i], pairs.q2[i], int(pairs.labels[i])] for i in range(n)]


def _write_slice(path, rows, delimiter, gz):
    opener = gzip.open if gz else open
    with opener(path, "wt", encoding="utf-8", newline="") as f:
        w = csv.writer(f, delimiter=delimiter)
        w.writerow(["id", "qid1", "qid2", "question1", "question2", "is_duplicate"])
        w.writerows(rows)


@pytest.mark.parametrize(
    "name, delimiter, gz", [("p.csv", ",", False), ("p.csv.gz", ",", True), ("p.tsv", "\t", False)]
)
def test_formats_give_the_same_pairs(synthetic_pairs, tmp_path, name, delimiter, gz):
    n = 2_000
    _write_slice(tmp_path / name, _rows(synthetic_pairs, n), delimiter, gz)
    pairs, dropped = read_pairs(tmp_path / name)
    assert dropped.count == 0
    assert pairs.q1 == synthetic_pairs.q1[:n] and pairs.q2 == synthetic_pairs.q2[:n]
    assert pairs.labels.tolist() == synthetic_pairs.labels[:n].tolist()


def test_unusable_rows_are_counted_and_named(synthetic_pairs, tmp_path):
    rows = _rows(synthetic_pairs, 50)
    rows[3][5] = "maybe"
    rows[7][3] = "   "
    rows[9] = rows[9][:4]
    _write_slice(tmp_path / "p.tsv", rows, "\t", False)
    pairs, dropped = read_pairs(tmp_path / "p.tsv")
    assert len(pairs) == 47 and dropped.count == 3
    assert dropped.reasons == {"label not 0 or 1": 1, "empty question": 1, "wrong number of fields": 1}
    assert dropped.examples[0] == f"{synthetic_pairs.ids[3]} (label not 0 or 1)"
    assert "dropped 3 unusable rows" in str(dropped)


def test_bad_files_raise_one_clear_error(tmp_path):
    with pytest.raises(DupqError, match="does not exist"):
        read_pairs(tmp_path / "nope.tsv")
    (tmp_path / "cols.tsv").write_text("id\tq1\tq2\tlabel\n1\ta\tb\t0\n")
    with pytest.raises(DupqError, match="lacks the column.*question1, question2, is_duplicate"):
        read_pairs(tmp_path / "cols.tsv")
    (tmp_path / "bad.tsv.gz").write_bytes(b"not gzip at all")
    with pytest.raises(DupqError, match="gzip"):
        read_pairs(tmp_path / "bad.tsv.gz")
    (tmp_path / "latin.tsv").write_bytes(b"question1\tquestion2\tis_duplicate\ncaf\xe9\tx\t0\n")
    with pytest.raises(DupqError, match="not UTF-8"):
        read_pairs(tmp_path / "latin.tsv")


def test_split_refuses_sizes_the_file_cannot_hold(synthetic_pairs):
    small = synthetic_pairs.take(synthetic_pairs.rows < 1_000)
    with pytest.raises(DupqError, match="needs 320480"):
        split_pairs(small)
    custom = split_pairs(small, SplitConfig(train_pool=800, test=100, dev=100, val_fraction=0.25))
    duplicates = len(custom.pool.take(custom.pool.labels == 1))
    assert len(custom.test) == 100 and len(custom.val) == duplicates - len(custom.train)


def _broken_pairs_file(path, n: int = 80, seed: int = 0) -> list[str]:
    """A synthetic pairs file whose rows are broken in every way a reader meets; returns each row's kind."""
    rng = random.Random(seed)
    kinds = [rng.choice(["ok"] * 6 + ["quote", "quote", "short", "long", "blank", "empty", "label"]) for _ in range(n)]
    lines = ["id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate"]
    for i, kind in enumerate(kinds):
        fields = [str(i), str(2 * i), str(2 * i + 1), f"How do I do thing {i}?", f"What is thing {i}?", str(i % 2)]
        if kind == "quote":
            fields[3] = '"' + fields[3]  # opens a quoted field that no quote closes on this line
        fields = {"short": fields[:4], "long": fields + ["x"]}.get(kind, fields)
        if kind == "empty":
            fields[4] = " "
        if kind == "label":
            fields[5] = "2"
        lines.append("" if kind == "blank" else "\t".join(fields))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return kinds


FIELDS = "wrong number of fields"
REASONS = {"quote": "unclosed quote", "short": FIELDS, "long": FIELDS, "blank": "blank line"}
REASONS |= {"empty": "empty question", "label": "label not 0 or 1"}


@pytest.mark.parametrize("seed", range(5))
def test_every_line_is_accounted_for_with_its_reason(tmp_path, seed):
    kinds = _broken_pairs_file(tmp_path / "p.tsv", seed=seed)
    assert "quote" in kinds
    pairs, dropped = read_pairs(tmp_path / "p.tsv")
    # The naive reference: one physical line, one verdict.
    assert pairs.ids == [str(i) for i, kind in enumerate(kinds) if kind == "ok"]
    assert pairs.q1 == [f"How do I do thing {i}?" for i, kind in enumerate(kinds) if kind == "ok"]
    assert pairs.rows.tolist() == [i for i, kind in enumerate(kinds) if kind == "ok"]
    assert dropped.reasons == Counter(REASONS[k] for k in kinds if k != "ok")
    assert len(pairs) + dropped.lines == len(kinds)
    assert str(dropped).startswith(f"dropped {len(kinds) - len(pairs)} unusable rows (")


def test_questions_files_account_for_every_line(tmp_path):
    kinds = _broken_pairs_file(tmp_path / "p.tsv", seed=3)
    qs = read_questions(tmp_path / "p.tsv")
    usable = [i for i, kind in enumerate(kinds) if kind in ("ok", "empty", "label")]
    both = {i: (f"How do I do thing {i}?", f"What is thing {i}?") for i in usable}
    assert qs.texts == [t for i in usable for t in both[i][: 1 if kinds[i] == "empty" else 2]]  # an empty q2 skipped
    assert qs.dropped.reasons == Counter(REASONS[k] for k in kinds if k not in ("ok", "label"))
    text = tmp_path / "q.txt"
    text.write_text("How are you?\n\n???\n  \nWhat is up?\n!!! ...\n", encoding="utf-8")
    qs = read_questions(text)
    assert qs.texts == ["How are you?", "What is up?"]
    assert qs.dropped.reasons == {"blank line": 2, "no words": 2} and qs.dropped.lines == 4
    assert qs.dropped.examples == [
        "line 2 (blank line)",
        "line 3 (no words)",
        "line 4 (blank line)",
        "line 6 (no words)",
    ]


def test_held_out_cuts_the_file_as_the_model_recorded(pairs_path, synthetic_pairs):
    """A model's metrics.json records its split; held_out reads the file and cuts it the same way."""
    got = held_out({"training": {"split": asdict(SMALL_SPLIT)}}, pairs_path)
    want = split_pairs(synthetic_pairs, SMALL_SPLIT)
    for part in ("train", "val", "test", "dev", "pool"):
        assert getattr(got, part).rows.tolist() == getattr(want, part).rows.tolist(), part
    with pytest.raises(DupqError, match=f"train pool {SplitConfig().train_pool} "):  # no record: the seed split
        held_out({}, pairs_path)
    with pytest.raises(DupqError, match="unknown split"):
        held_out({"training": {"split": {"shards": 3}}}, pairs_path)
