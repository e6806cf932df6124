"""The synthetic pairs generator (tests/support/synthetic.py): the promises the other tests rely on."""

from __future__ import annotations

import csv
import gzip
from collections import Counter

from dupq.data.tokenizer import PAD, UNK, Vocabulary
from support.synthetic import DUPLICATE_SHARE, EMPTY_ROWS, HEADER, NA_ROW, make_rows, write_pairs

N = 24_000  # the small split's rows


def test_deterministic_and_a_longer_file_starts_with_a_shorter_one(tmp_path):
    a = write_pairs(tmp_path / "a.tsv.gz", 3_000, seed=7)
    b = write_pairs(tmp_path / "b.tsv", 5_000, seed=7)
    with gzip.open(a, "rt", encoding="utf-8", newline="") as f:
        short = f.read().splitlines()
    long = b.read_text(encoding="utf-8").splitlines()
    assert short[0] == "\t".join(HEADER) and len(short) == 3_001
    assert long[: len(short)] == short
    assert make_rows(2_000, seed=8) != make_rows(2_000, seed=7)


def test_format_is_quora_s():
    rows = make_rows(N)
    assert [r.id for r in rows] == list(range(N))
    share = sum(r.is_duplicate for r in rows) / N
    assert abs(share - DUPLICATE_SHARE) < 0.01, share
    assert all(r.question2 == "" and r.is_duplicate == 0 for r in rows if r.id in EMPTY_ROWS)
    assert rows[NA_ROW].question1 == "n/a" and rows[NA_ROW].is_duplicate == 0
    assert all(r.question1 != r.question2 for r in rows)


def test_written_file_quotes_as_csv_does(tmp_path):
    path = write_pairs(tmp_path / "p.tsv", 2_000)
    with open(path, encoding="utf-8", newline="") as f:
        table = list(csv.reader(f, delimiter="\t"))
    rows = make_rows(2_000)
    fields = [[r.id, r.qid1, r.qid2, r.question1, r.question2, r.is_duplicate] for r in rows]
    assert table[1:] == [[str(f) for f in row] for row in fields]
    assert any('"' in r.question1 + r.question2 for r in rows)  # some fields need quoting
    assert len(path.read_text(encoding="utf-8").splitlines()) == 2_001  # no field runs over a line


def test_labels_follow_the_concepts_and_never_contradict():
    rows = [r for r in make_rows(N) if None not in r.concepts]
    assert all(r.is_duplicate == (r.concepts[0] == r.concepts[1]) for r in rows)
    label = {}
    for r in rows:  # the same two texts always get the same label, in either order
        key = frozenset((r.question1, r.question2))
        assert label.setdefault(key, r.is_duplicate) == r.is_duplicate


def test_qids_are_one_per_text_and_questions_repeat():
    rows = make_rows(N)
    qid = {}
    for r in rows:
        for text, q in ((r.question1, r.qid1), (r.question2, r.qid2)):
            assert qid.setdefault(text, q) == q, text
    assert len(set(qid.values())) == len(qid)  # and one text per qid
    uses = Counter(t for r in rows for t in (r.question1, r.question2))
    assert 0.4 < len(uses) / (2 * N) < 0.8  # Quora: 537,628 distinct questions in 808,002 slots (0.67)
    assert sum(n >= 3 for n in uses.values()) > 1_000  # some questions are in several pairs


def test_duplicates_are_rewordings_and_non_duplicates_near_misses():
    """Duplicates share their topic words but not their wording; most non-duplicates share a template or a topic."""
    rows = [r for r in make_rows(N) if None not in r.concepts]
    vocab = Vocabulary([PAD, UNK])

    def jaccard(r):
        a, b = set(vocab.words(r.question1)), set(vocab.words(r.question2))
        return len(a & b) / len(a | b)

    duplicates = [r for r in rows if r.is_duplicate]
    others = [r for r in rows if not r.is_duplicate]
    assert all(set(vocab.words(r.concepts[0].subject)) <= set(vocab.words(r.question2)) for r in duplicates)
    assert sum(jaccard(r) < 1 for r in duplicates) == len(duplicates)  # never the same words

    def differences(r):  # the fields in which the two questions' concepts differ
        return sum(a != b for a, b in zip(vars(r.concepts[0]).values(), vars(r.concepts[1]).values()))

    near = [r for r in others if differences(r) == 1]
    assert 0.5 < len(near) / len(others) < 0.9
    assert sum(map(jaccard, near)) / len(near) > sum(map(jaccard, others)) / len(others)


def test_distinct_questions_have_distinct_known_words():
    """No two questions encode alike for want of a word: distinct texts differ in words the small split's training knows."""
    rows = make_rows(N)
    duplicates = [r for r in rows if r.id < 20_000 and r.is_duplicate]
    train = duplicates[: int(0.8 * len(duplicates))]  # the small split's training pairs
    vocab = Vocabulary.build([q for r in train for q in (r.question1, r.question2)])
    texts = {q for r in rows for q in (r.question1, r.question2)} - {"", "n/a"}
    encoded = {tuple(vocab.encode([t]).flat.tolist()) for t in texts}
    assert len(encoded) == len(texts)
    assert all(1 not in ids for ids in encoded)  # every word is known
