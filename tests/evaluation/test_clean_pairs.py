"""The hand-written clean pairs (``dupq evaluate --task clean-pairs``)."""

from __future__ import annotations

import csv
import json
import re
import statistics

import numpy as np
import pytest

from dupq.evaluation.tasks import CLEAN_PAIRS as PAIRS
from dupq.evaluation.tasks import judged_clean_pairs
from dupq.modeling.model import Model
from dupq.modeling.verdict import on_cosines
from support.kit import ok

LABEL = {"paraphrase": "1", "near_miss": "0"}


def rows() -> list[dict[str, str]]:
    with open(PAIRS, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f, delimiter="\t"))


def normalised(text: str) -> str:
    return " ".join(text.casefold().split())


def words(text: str) -> set[str]:
    return set(re.findall(r"[a-z0-9']+", text.lower()))


def test_file_is_well_formed():
    with open(PAIRS, newline="", encoding="utf-8") as f:
        header, *body = csv.reader(f, delimiter="\t")
    assert header == ["question1", "question2", "is_duplicate", "kind"]
    assert len(body) >= 200
    assert all(len(row) == 4 for row in body), [row for row in body if len(row) != 4][:3]
    kinds = [row[3] for row in body]
    assert set(kinds) == set(LABEL)
    for kind in LABEL:
        assert kinds.count(kind) >= 0.4 * len(body), (kind, kinds.count(kind), len(body))
    assert [row for row in body if row[2] != LABEL.get(row[3])] == []
    seen = set()
    for q1, q2, _, _ in body:
        assert normalised(q1) != normalised(q2), q1
        assert q1.endswith("?") and q2.endswith("?"), (q1, q2)
        key = frozenset((normalised(q1), normalised(q2)))  # either order
        assert key not in seen, (q1, q2)
        seen.add(key)


def test_near_misses_share_words_and_paraphrases_do_not():
    overlap = {kind: [] for kind in LABEL}
    for row in rows():
        a, b = words(row["question1"]), words(row["question2"])
        overlap[row["kind"]].append(len(a & b) / len(a | b))  # Jaccard of the word sets
    # Seen when written: median 0.80 for near misses (1.0 for direction swaps), 0.05 for paraphrases.
    assert statistics.median(overlap["near_miss"]) > statistics.median(overlap["paraphrase"])


@pytest.mark.real_data
def test_no_question_is_taken_from_quora(all_pairs):
    """The yardstick is hand-written: none of its questions is a Quora question (needs the real file to look)."""
    quora = {normalised(q) for q in (*all_pairs.q1, *all_pairs.q2)}
    found = [q for row in rows() for q in (row["question1"], row["question2"]) if normalised(q) in quora]
    assert found == []


def test_the_figures_agree_with_a_loop_over_the_pairs_and_every_paraphrase_near_miss_couple():
    rng = np.random.default_rng(3)
    kinds = ["paraphrase", "near_miss"] * 20
    scores = np.round(rng.uniform(-1, 1, size=40), 1)  # rounded: ties count half in the ROC-AUC
    got = judged_clean_pairs(on_cosines(scores, 0.2), np.array([1, 0] * 20))
    said = [s > 0.2 for s in scores]
    para = [d for d, k in zip(said, kinds) if k == "paraphrase"]
    near = [not d for d, k in zip(said, kinds) if k == "near_miss"]
    by_kind = {kind: [s for s, k in zip(scores, kinds) if k == kind] for kind in LABEL}
    couples = [(p, n) for p in by_kind["paraphrase"] for n in by_kind["near_miss"]]
    auc = sum(1.0 if p > n else 0.5 if p == n else 0.0 for p, n in couples) / len(couples)
    assert got["accuracy"] == round((sum(para) + sum(near)) / 40, 4)
    assert got["paraphrase_recall"] == round(np.mean(para), 4)
    assert got["near_miss_specificity"] == round(np.mean(near), 4)
    assert got["roc_auc"] == round(auc, 4) and got["threshold"] == 0.2 and got["pairs"] == 40


@pytest.mark.slow
def test_dupq_evaluate_task_clean_pairs_matches_a_naive_recount():
    judged = json.loads(ok("evaluate", "--task", "clean-pairs", "--json").stdout)
    table = rows()
    model = Model.load()
    assert judged["threshold"] == model.threshold and judged["threshold_on"] == model.threshold_on
    assert judged["pairs"] == len(table) and judged["kinds"] == {"paraphrase": 126, "near_miss": 126}
    right = {kind: 0 for kind in LABEL}
    for row in table:
        duplicate = model.scores(row["question1"], row["question2"]) > model.threshold
        right[row["kind"]] += duplicate == (row["is_duplicate"] == "1")
    count = {kind: sum(row["kind"] == kind for row in table) for kind in LABEL}
    assert judged["accuracy"] == pytest.approx(sum(right.values()) / len(table), abs=6e-5)
    assert judged["paraphrase_recall"] == pytest.approx(right["paraphrase"] / count["paraphrase"], abs=6e-5)
    assert judged["near_miss_specificity"] == pytest.approx(right["near_miss"] / count["near_miss"], abs=6e-5)
