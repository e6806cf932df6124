"""dupq-lab desk-verdict's counts of the top hit, as written and with judged duplicates, against a loop."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from dupq_lab.experiments.desk_verdict import judged_wrong, tier_measures


def hit(i: int, duplicate: bool) -> SimpleNamespace:
    return SimpleNamespace(id=i, duplicate=duplicate, tier="duplicate" if duplicate else "suggest")


def test_judged_duplicates_change_the_duplicate_tiers_precision_and_recall_as_a_loop_counts():
    rng = np.random.default_rng(0)
    own = list(range(50))  # query q's own old question is question q
    hits = [[hit(int(i), bool(rng.random() < 0.5)) for i in rng.choice(80, size=3, replace=False)] for _ in own]
    judged = [{row[0].id} if q % 2 else {int(rng.integers(50, 80))} for q, row in zip(own, hits)]  # judged duplicates
    for relevant in ([{o} for o in own], [{o} | j for o, j in zip(own, judged)]):
        measured = tier_measures(hits, relevant, "duplicate")
        flagged = right = 0
        for row, r in zip(hits, relevant):
            flagged += row[0].duplicate
            right += row[0].duplicate and row[0].id in r
        assert measured["top_flagged"] == flagged
        assert measured["precision"] == pytest.approx(round(right / flagged, 4))
        assert measured["recall"] == pytest.approx(round(right / len(own), 4))
    relevant = [{o} | j for o, j in zip(own, judged)]
    as_written = tier_measures(hits, [{o} for o in own], "duplicate")
    assert tier_measures(hits, relevant, "duplicate")["recall"] > as_written["recall"]
    wrong = [(row[0], j) for row, o, j in zip(hits, own, judged) if row[0].duplicate and row[0].id != o]
    want = {"wrong_as_written": len(wrong), "judged_duplicates": sum(t.id in j for t, j in wrong)}
    assert judged_wrong(hits, relevant, own, "duplicate") == want
