"""Faults of moderators' decisions and what is made of them: reserved fields of the wrong type, decisions on
texts that changed since, cycles and removed targets, a pairs file that does not read back, and a
calibration on decisions too noisy or too few to trust.
"""

from __future__ import annotations

import json
import random
import sqlite3
from pathlib import Path

import pytest
from faultkit import AUTH, build, clean, client, dupq, model_copy, pairs_file, sql, synthetic

from support.errors import library_refuses, refused

pytestmark = pytest.mark.faults


def test_reserved_decision_fields(tmp_path: Path):
    """A string `not_duplicate_of` from a CSV ("12", once read as keys "1" and "2"), `duplicate_of` ["x"] or 5: refused
    in one sentence by `index build`, the library and the API; stored before the rule, `index decisions` skips them
    with a warning and the decision route answers without a 500, the stored value kept."""
    from dupq.collection.collection import Collection

    texts = synthetic(3)
    table = tmp_path / "q.csv"
    table.write_text(f"key,question,not_duplicate_of\n1,{texts[0]},2\n2,{texts[1]},1\n12,{texts[2]},12\n")
    refused(dupq("index", "build", str(table), "--out", str(tmp_path / "c"), "--key-column", "key"), "not_duplicate_of")
    assert not (tmp_path / "c").exists()

    folder = build(tmp_path / "d", n=10, keys=True)
    with Collection.open(folder) as coll:
        assert library_refuses(lambda: coll.add(synthetic(1, 50), metadata=[{"not_duplicate_of": 5}]))
        assert library_refuses(lambda: coll.update("k1", metadata={"duplicate_of": ["k2"]}))
        assert library_refuses(lambda: coll.update("k1", metadata={"not_duplicate_of": "k12"}))
    with client(folder) as c:
        put = c.put("/questions/k1", json={"metadata": {"duplicate_of": 5}}, headers=AUTH)
        assert 400 <= put.status_code < 500, put.text

    old = {1: '{"not_duplicate_of": 5}', 2: '{"duplicate_of": ["x"]}', 3: '{"not_duplicate_of": "k12"}'}
    for i, text in old.items():  # stored by a dupq before the rule
        sql(folder, "UPDATE questions SET metadata = ? WHERE id = ?", text, i)
    with Collection.open(folder) as coll:
        coll.decide("k5", duplicate_of="k6")
    run = clean(dupq("index", "decisions", str(folder), "--out", str(tmp_path / "p.tsv")))
    assert b"warning" in run.stderr and b"k1" in run.stderr, run.stderr
    assert b"wrote 1 decision" in run.stdout, run.stdout
    with client(folder) as c:
        answers = [
            c.post(f"/questions/k{i}/decision", json={"not_duplicate_of": "k9"}, headers=AUTH) for i in (1, 2, 3)
        ]
    assert all(a.status_code < 500 for a in answers), [a.text for a in answers]
    with sqlite3.connect(folder / "questions.sqlite") as db:
        kept = dict(db.execute("SELECT id, metadata FROM questions WHERE id IN (1, 2, 3)").fetchall())
    assert all(json.loads(kept[i]) == json.loads(old[i]) for i in old if answers[i - 1].status_code >= 400), kept


def test_decisions_follow_the_texts_judged(tmp_path: Path):
    """A decision, then one side's text updated (or removed and added again under its key): `index decisions` leaves
    the pair out and says so, instead of exporting a pair nobody judged with the old label."""
    from dupq.collection.collection import Collection

    folder = build(tmp_path / "c", n=12, keys=True)
    with Collection.open(folder) as coll:
        coll.decide("k1", duplicate_of="k2")
        coll.decide("k3", not_duplicate_of="k4")
        coll.decide("k5", duplicate_of="k6")
        coll.update("k2", text="Which river is the longest in Africa?")
        coll.remove(["k4"])
        coll.add(["Where do volcanoes form?"], keys=["k4"])
    run = clean(dupq("index", "decisions", str(folder), "--out", str(tmp_path / "p.tsv")))
    rows = (tmp_path / "p.tsv").read_text().splitlines()[1:]
    assert [r.split("\t")[1:3] for r in rows] == [["k5", "k6"]], rows
    assert b"2 decisions" in run.stderr, run.stderr


def test_decisions_name_living_questions_without_cycles(tmp_path: Path):
    """A decision that closes a cycle (a of b, b of a; or through a chain) is refused; a canonical question removed
    since is no longer shown as `duplicate_of` of its duplicates."""
    from dupq.collection.collection import Collection

    folder = build(tmp_path / "c", n=12, keys=True)
    with Collection.open(folder) as coll:
        coll.decide("k1", duplicate_of="k2")
        assert library_refuses(lambda: coll.decide("k2", duplicate_of="k1"))
        coll.decide("k3", duplicate_of="k4")
        coll.decide("k4", duplicate_of="k5")
        assert library_refuses(lambda: coll.decide("k5", duplicate_of="k3"))
        coll.decide("k7", duplicate_of="k8")
        coll.remove(["k8"])
    run = clean(dupq("search", str(folder), synthetic(8)[7], "-k", "1", "--json"))
    hit = json.loads(run.stdout)["hits"][0]
    assert hit["key"] == "k7" and hit["duplicate_of"] is None, hit


def test_pair_files_round_trip(tmp_path: Path):
    """Decisions on questions holding a bare CR: `index decisions` writes a file whose every row reads back, and a
    pairs file with rows that cannot be used makes `calibrate --pairs` say how many it dropped."""
    from dupq.collection.collection import Collection
    from dupq.data.pairs import read_pairs
    from dupq.modeling.model import Model

    texts = [t.replace(" in ", " in\r") if i % 3 == 0 else t for i, t in enumerate(synthetic(40))]
    keys = [f"k{i}" for i in range(40)]
    Collection.build(tmp_path / "c", texts, Model.load(), keys=keys).close()
    with Collection.open(tmp_path / "c") as coll:
        for i in range(0, 40, 2):
            coll.decide(keys[i], **{"duplicate_of" if i % 4 else "not_duplicate_of": keys[i + 1]})
    clean(dupq("index", "decisions", str(tmp_path / "c"), "--out", str(tmp_path / "p.tsv")))
    pairs, dropped = read_pairs(tmp_path / "p.tsv")
    assert len(pairs) == 20 and dropped.count == 0, str(dropped)
    assert sorted(pairs.q1) == sorted(texts[i] for i in range(0, 40, 2))

    broken = tmp_path / "broken.tsv"
    broken.write_text((tmp_path / "p.tsv").read_text() + "98\tx\ty\t\tHow?\t1\n99\tx\ty\tWhy is it?\tHow?\t7\n")
    model = model_copy(tmp_path / "m")
    run = dupq("calibrate", str(model), "--pairs", str(broken))
    assert b"skipped 2 line(s)" in run.stderr, (run.stdout + run.stderr).decode()


def test_calibrate_on_untrustworthy_decisions(tmp_path: Path):
    """`calibrate --pairs` on decisions whose labels are noise fitted a flat map and saved it without a word; on 24
    separable pairs it pushed every pair to 0 or 1. Now it prints accuracy, ROC-AUC and ECE before and after
    (cross-validated), refuses a flat or worse fit (the model kept), and says when the decisions are too few."""
    from dupq.data.pairs import read_pairs
    from dupq.evaluation.evaluate import pair_logits
    from dupq.modeling.model import Model
    from dupq.modeling.probability import calibrated

    model = model_copy(tmp_path / "m")
    config = (model / "config.json").read_bytes()
    rng = random.Random(0)
    noisy = pairs_file(tmp_path, labels=[rng.randint(0, 1) for _ in range(400)], name="noisy.tsv")
    run = dupq("calibrate", str(model), "--pairs", str(noisy))
    refused(run, "calibration")
    out = run.stdout.decode()
    assert "ROC-AUC" in out and "ECE" in out and "accuracy" in out, out
    assert (model / "config.json").read_bytes() == config

    few = pairs_file(tmp_path, 24, name="few.tsv")
    run = dupq("calibrate", str(model), "--pairs", str(few))
    said = (run.stdout + run.stderr).decode()
    assert "too few" in said, said
    if run.returncode == 0:  # saved: no pair judged certain (0.0000 or 1.0000) on 24 decisions
        m = Model.load(model)
        pairs, _ = read_pairs(few)
        p = calibrated(m.judge.calibration, pair_logits(m, pairs)[0])
        assert 0.001 < p.min() and p.max() < 0.999, p
    else:
        refused(run)
        assert (model / "config.json").read_bytes() == config
