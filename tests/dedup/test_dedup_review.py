"""What a moderator reads of a dedup run: the representative, sizes, member scores, tiers and confidence of each
group against a brute-force computation, the promised orders (the file surest first; the review page largest,
then least certain, first), and the review page itself (escaped, self-contained, never over an existing folder)."""

from __future__ import annotations

import json
import re

import numpy as np
from dedupkit import naive_star, pool_texts, run_cli

from dupq.dedup import run as dedup_run
from dupq.dedup.clusters import Clusters
from dupq.dedup.grouping import DedupConfig
from dupq.dedup.review import for_review, groups_of, ranked, write_review
from dupq.modeling.verdict import PROBABILITY, dedup_tiers, from_vectors
from support.errors import refused


def pair_scores(model, texts: list[str]) -> list[list[float]]:
    """Every pair's score as the model judges a lone pair, one pair at a time; 1.0 for the very same text."""
    v, n = model.encode(texts), len(texts)
    score = [[float(from_vectors(model, v[i : i + 1], v[j : j + 1]).score[0]) for j in range(n)] for i in range(n)]
    return [[1.0 if texts[i] == texts[j] else score[i][j] for j in range(n)] for i in range(n)]


def test_groups_equal_a_brute_force_computation_surest_first(small_splits, tiny_model, tmp_path):
    texts = pool_texts(small_splits, 60)
    texts += texts[:3]  # exact repeats
    threshold = 0.8
    config = DedupConfig(threshold=threshold)
    config.candidates.neighbours = len(texts)  # every pair is a candidate, as the brute force looks at every pair
    records = [dedup_run.Record(t, f"k{i}") for i, t in enumerate(texts)]
    summary = dedup_run.run(records, tmp_path / "g.jsonl", tiny_model, config, {"f": 1})
    rows = [json.loads(x) for x in (tmp_path / "g.jsonl").read_text().splitlines()]
    thresholds = dedup_tiers(tiny_model, threshold, tiny_model.threshold_on)

    written: dict[int, list[dict]] = {}
    for r in rows:
        written.setdefault(r["cluster"], []).append(r)
    score = pair_scores(tiny_model, texts)
    expected = {c: {j: score[c][j] for j in members} for c, members in naive_star(score, threshold).items()}
    assert len(written) == len(expected) > 3
    for members in written.values():
        rep = members[0]
        assert rep["representative"] == 1 and rep["tier"] == "" and rep["index"] in expected
        truth = expected[rep["index"]]
        assert {m["index"] for m in members[1:]} == set(truth)
        for m in members[1:]:
            assert m["representative"] == 0 and abs(m["score"] - truth[m["index"]]) < 1e-3
            assert m["tier"] == ("duplicate" if truth[m["index"]] > thresholds["duplicate"] else "suggest")
        assert all(m["size"] == len(truth) + 1 for m in members)
        assert all(abs(m["confidence"] - min(truth.values())) < 1e-3 for m in members)
    # the file lists its groups surest first (falling confidence, then falling size), each group's rows together
    order = list(dict.fromkeys(r["cluster"] for r in rows))
    keys = [(-written[c][0]["confidence"], -written[c][0]["size"], c) for c in order]
    assert keys == sorted(keys) and len(order) == len(written)
    assert [g["cluster"] for g in summary.surest] == order[: len(summary.surest)]


def test_a_components_member_is_scored_with_its_representative_not_its_best_edge(small_splits, tiny_model, tmp_path):
    texts = pool_texts(small_splits, 60)
    config = DedupConfig(threshold=0.8, method="components")
    config.candidates.neighbours = len(texts)
    dedup_run.run([dedup_run.Record(t, str(i)) for i, t in enumerate(texts)], tmp_path / "g.jsonl", tiny_model,
                  config, {"f": 1})  # fmt: skip
    rows = [json.loads(x) for x in (tmp_path / "g.jsonl").read_text().splitlines()]
    score = pair_scores(tiny_model, texts)
    reps = {r["cluster"]: r["index"] for r in rows if r["representative"]}
    members = [r for r in rows if not r["representative"]]
    assert any(score[r["index"]][reps[r["cluster"]]] <= 0.8 for r in members)  # a chain brought one in
    for r in members:
        assert abs(r["score"] - score[r["index"]][reps[r["cluster"]]]) < 1e-3
        assert r["confidence"] == min(m["score"] for m in members if m["cluster"] == r["cluster"])


def toy_clusters() -> Clusters:
    """Four groups: sizes 3, 3, 2, 2 with confidences 0.9, 0.6, 0.95, 0.7 (numbered largest first)."""
    label = np.array([0, 0, 0, 1, 1, 1, 2, 2, 3, 3, -1])
    rep = np.array([1, 0, 0, 1, 0, 0, 1, 0, 1, 0, 0], bool)
    score = np.array([1, 0.95, 0.9, 1, 0.8, 0.6, 1, 0.95, 1, 0.7, np.nan], np.float32)
    return Clusters(label, rep, score)


def test_orders_and_tiers_on_hand_made_groups():
    groups = groups_of(toy_clusters())
    assert [(g.size, round(g.confidence, 2)) for g in groups] == [(3, 0.9), (3, 0.6), (2, 0.95), (2, 0.7)]
    assert [g.number for g in ranked(toy_clusters())] == [2, 0, 3, 1]  # surest first
    assert [g.number for g in for_review(groups)] == [1, 0, 3, 2]  # largest, then least certain, first
    assert groups[1].tiers({"suggest": 0.5, "duplicate": 0.7}) == ["", "duplicate", "suggest"]


def test_dedup_tiers_use_the_search_calibration_only_for_a_probability():
    class Judge:
        search_calibration = {"suggest": 0.2, "duplicate": 0.6}

    class WithCalibration:
        judge = Judge

    assert dedup_tiers(WithCalibration, 0.45, PROBABILITY) == {"suggest": 0.45, "duplicate": 0.6, "on": PROBABILITY}
    assert dedup_tiers(WithCalibration, 0.7, PROBABILITY)["duplicate"] == 0.7  # never below the run's threshold
    assert dedup_tiers(WithCalibration, 0.8, "similarity")["duplicate"] == 0.8  # a cosine: one tier
    Judge.search_calibration = None
    assert dedup_tiers(WithCalibration, 0.45, PROBABILITY)["duplicate"] == 0.45


def test_review_page_escapes_text_and_lists_groups_largest_then_least_certain_first(tmp_path):
    texts = [f"question {i}" for i in range(11)]
    texts[5] = "<script>alert('x')</script> & more"
    thresholds = {"suggest": 0.5, "duplicate": 0.75, "on": "similarity"}
    page = write_review(tmp_path / "review", groups_of(toy_clusters()), texts.__getitem__, str, thresholds)
    html = page.read_text()
    assert page == tmp_path / "review" / "index.html" and [p.name for p in page.parent.iterdir()] == ["index.html"]
    assert "<script" not in html and "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt; &amp; more" in html
    assert not re.search(r"(src|href)=|<link|@import|url\(", html)  # no external asset
    assert [int(n) for n in re.findall(r"<h2>Group (\d+):", html)] == [1, 0, 3, 2]
    assert "tier suggest" in html and "tier duplicate" in html
    assert not list(tmp_path.glob(".review*"))  # the hidden folder it was filled in is gone
    short = write_review(tmp_path / "short", groups_of(toy_clusters()), texts.__getitem__, str, thresholds, limit=2)
    assert [int(n) for n in re.findall(r"<h2>Group (\d+):", short.read_text())] == [1, 0]
    assert "The first 2 of 4 groups" in short.read_text()


def test_cli_review_writes_the_page_and_refuses_an_existing_folder(tmp_path, tiny_model_dir):
    qfile = tmp_path / "q.txt"
    qfile.write_text("<script>x</script> how?\n<script>x</script> how?\nWhy is the sky blue?\n")
    args = (qfile, "--model", tiny_model_dir, "--threshold", "0.99")
    r = run_cli(*args, "--out", tmp_path / "d.csv", "--review", tmp_path / "review")
    assert r.exit_code == 0, r.output
    assert "group 0: 2 questions, confidence 1.00: <script>x</script> how?" in r.output
    html = (tmp_path / "review" / "index.html").read_text()
    assert "&lt;script&gt;x&lt;/script&gt; how?" in html and "<script" not in html
    (tmp_path / "taken").mkdir()
    r = run_cli(*args, "--out", tmp_path / "e.csv", "--review", tmp_path / "taken")
    refused(r, f"the review folder {tmp_path / 'taken'} already exists")
    assert not (tmp_path / "e.csv").exists() and not list(tmp_path.glob("e.csv.work"))
