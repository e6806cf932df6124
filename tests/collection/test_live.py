"""A collection that lives: removal and update by key, scoped (filtered) search, moderators' decisions.

Most tests run on every store (the ``location`` fixture: a folder, milvus-lite, Postgres) and compare with a naive
reference: a brute-force search over the stored vectors with the filter applied row by row
(:func:`collkit.check_search`), or the rows read back.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from collkit import ASKS, TOPICS, check_search, kill_9_when
from fastapi.testclient import TestClient

from dupq.collection.backend import check_where, matches
from dupq.collection.collection import Collection, KeyConflict, UnknownKey
from dupq.core.errors import DupqError
from dupq.data.pairs import read_pairs
from dupq.index import vectors as vector_module
from dupq.index.vectors import IndexConfig, VectorIndex
from dupq.index.vectors import search as exact_search
from dupq.modeling.model import Model
from dupq.service.app import create_app
from support.errors import refused
from support.kit import cli
from support.serving import metric

N = 400


def desk(n: int = N) -> tuple[list[str], list[str], list[dict]]:
    """``n`` distinct questions with keys and metadata: product (4 values), status (2), rare (1 in 200).

    The texts differ in words the small model knows (two topics and a template), so they encode apart."""
    texts = [f"{ASKS[i % 4].format(TOPICS[(i // 4) % 10])} And {TOPICS[(i // 40) % 10]}?" for i in range(n)]
    keys = [f"t{i}" for i in range(n)]
    meta = [
        {"product": ["mail", "calendar", "drive", "chat"][i % 4], "status": ["open", "solved"][i % 7 == 0], "n": i}
        | ({"rare": "yes"} if i % 200 == 3 else {})
        | ({"tags": ["mail"]} if i % 5 == 0 else {})  # a list equal to no string filter
        for i in range(n)
    ]
    return texts, keys, meta


@pytest.fixture
def live(location, tiny_model):
    texts, keys, meta = desk()
    with Collection.build(location, texts, tiny_model, keys=keys, metadata=meta) as coll:
        yield coll, texts


WHERES = [
    {"product": "mail"},  # a quarter
    {"product": ["mail", "chat"], "status": "solved"},  # any of, and both fields
    {"rare": "yes"},  # two rows
    {"n": 17},  # one row, by number
    {"tags": "mail"},  # a list in the metadata matches no string
    {"product": "none"},  # nothing
    # nine values or more: Postgres tests them by one hashed = ANY, not by containments; the same rows
    {"n": [*range(0, 400, 7), 1.0, True]},  # 1.0 and true are 1 by the rule
    {"tags": ["mail", *(f"x{i}" for i in range(10))]},  # a list still equals no string
    {"product": ["mail", "chat", *(f"x{i}" for i in range(10))], "status": "solved"},
]


@pytest.mark.parametrize("where", WHERES, ids=lambda w: json.dumps(w))
def test_a_filtered_search_is_the_brute_force_filter(live, where):
    coll, texts = live
    check_search(coll, texts[:6] + ["How do I learn about chess?"], 10, where)


def test_a_collection_keeps_to_a_filter_through_faiss_selectors(tmp_path, tiny_model, monkeypatch):
    """The selector path (not the exact scan of few rows) of a flat index: the brute-force answer."""
    monkeypatch.setattr(vector_module, "scans_exactly", lambda *args: False)
    texts, keys, meta = desk()
    with Collection.build(tmp_path / "c", texts, tiny_model, keys=keys, metadata=meta) as coll:
        coll.remove(["t0", "t4"])  # tombstones and a filter together
        for where in WHERES[:3]:
            check_search(coll, texts[:8], 10, where)


@pytest.mark.parametrize("kind", ["flat", "hnsw"])
@pytest.mark.parametrize("share", [1 - 1 / 3000, 0.75, 0.5, 0.05, 0.01])
def test_a_masked_index_search_finds_what_brute_force_finds(kind, share, monkeypatch):
    """VectorIndex.search kept to some ids (a filter, or the removed left out), by the path it chooses, through the
    selector (forced) and through the exact scan (forced), against brute force over random unit vectors (the graph a
    real collection has: the small model's many ties make a poor one). A graph with one removal, or a quarter, is
    walked with them left out, not turned into an exact scan of the others."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3000, 32)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    index = VectorIndex(32, IndexConfig(kind=kind))
    index.add(x)
    allowed = np.ones(3000, dtype=bool)
    allowed[rng.choice(3000, max(1, round(3000 * (1 - share))), replace=False)] = False
    queries = x[rng.choice(3000, 50, replace=False)]
    ids = np.flatnonzero(allowed)
    want = ids[exact_search(queries, x[ids], 10)[1]]
    scans = []
    monkeypatch.setattr(vector_module, "search", lambda *a, **kw: scans.append(1) or exact_search(*a, **kw))
    for exact in (None, False, True):  # as chosen, the selector, the exact scan
        if exact is not None:
            monkeypatch.setattr(vector_module, "scans_exactly", lambda *args, exact=exact: exact)
        _, got = index.search(queries, 10, allowed=allowed)
        assert allowed[got[got >= 0]].all()
        recall = np.mean([len(set(g) & set(w)) / len(w) for g, w in zip(got.tolist(), want.tolist())])
        assert recall >= (1.0 if kind == "flat" or exact else 0.99), recall
        assert exact is not None or kind == "flat" or share < 0.75 or not scans  # the graph walked


def test_remove_and_update_by_key(live, location, tiny_model):
    coll, texts = live
    removed = coll.remove(["t3", "t10"])
    assert len(removed) == 2 and len(coll) == N - 2
    for query in (texts[3], texts[10]):
        assert {"t3", "t10"}.isdisjoint(h.key for h in coll.search([query], k=20)[0])
    with pytest.raises(UnknownKey, match="t3"):
        coll.remove(["t4", "t3"])  # one key not stored: nothing is removed
    assert len(coll) == N - 2 and coll.get("t4")[1] == texts[4]
    new = "Which river flows through the most countries in the world?"
    i = coll.update("t7", text=new)
    assert coll.update("t7", text=new) == i and len(coll) == N - 2  # a retry changes nothing
    top = coll.search([new], k=1)[0][0]
    assert (top.key, top.text) == ("t7", new)
    assert all(h.text != texts[7] for h in coll.search([texts[7]], k=N)[0])  # the old text is found no more
    assert coll.update("t8", metadata={"product": "chat"}) == coll.get("t8")[0]
    assert coll.search([texts[8]], k=1, where={"product": "chat"})[0][0].key == "t8"
    with pytest.raises(UnknownKey):
        coll.update("nobody", text=new)
    check_search(coll, [texts[3], new, texts[8]], 10, {"product": ["chat", "mail"]})
    with Collection.open(location, tiny_model) as again:  # another handle sees every change
        assert len(again) == N - 2 and again.get("t7")[1] == new
        assert "t3" not in {h.key for h in again.search([texts[3]], k=20)[0]}


def test_a_decision_names_the_canonical_question_and_becomes_a_labelled_pair(live, tmp_path):
    coll, texts = live
    coll.decide("t5", duplicate_of="t1")
    coll.decide("t6", not_duplicate_of="t2")
    coll.decide("t9", duplicate_of="t2")
    coll.decide("t9", not_duplicate_of="t2", change=True)  # a moderator changes their mind: no longer a duplicate
    hit = next(h for h in coll.search([texts[5]], k=N)[0] if h.key == "t5")
    assert hit.duplicate_of == "t1"
    assert all(h.duplicate_of is None for h in coll.search([texts[5]], k=N)[0] if h.key != "t5")
    assert sorted(coll.decisions()) == sorted(
        [("t5", "t1", texts[5], texts[1], 1), ("t6", "t2", texts[6], texts[2], 0), ("t9", "t2", texts[9], texts[2], 0)]
    )
    with pytest.raises(UnknownKey):
        coll.decide("t5", duplicate_of="nobody")
    with pytest.raises(DupqError):
        coll.decide("t5", duplicate_of="t5")


def test_a_contradicting_decision_is_refused_unless_it_is_a_change(live):
    coll, texts = live
    coll.decide("t5", duplicate_of="t1")
    coll.decide("t5", duplicate_of="t1")  # the same decision again contradicts nothing
    coll.decide("t5", not_duplicate_of="t3")  # another question: no contradiction either
    before = coll.get("t5")[2]
    for contradiction in ({"not_duplicate_of": "t1"}, {"duplicate_of": "t2"}, {"duplicate_of": "t3"}):
        with pytest.raises(KeyConflict, match="contradicts"):
            coll.decide("t5", **contradiction)
        assert coll.get("t5")[2] == before  # nothing was changed
    after = coll.decide("t5", duplicate_of="t2", change=True)
    (changed,) = after["decision_changes"]
    assert changed["was"] == {"duplicate_of": "t1"} and changed["now"] == {"duplicate_of": "t2"}
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00", changed["at"])
    after = coll.decide("t5", not_duplicate_of="t2", change=True)
    assert [c["was"] for c in after["decision_changes"]] == [{"duplicate_of": "t1"}, {"duplicate_of": "t2"}]
    assert "duplicate_of" not in after and after["not_duplicate_of"] == ["t3", "t2"]
    assert sorted(coll.decisions()) == [("t5", "t2", texts[5], texts[2], 0), ("t5", "t3", texts[5], texts[3], 0)]


def test_a_ticket_sent_again_after_a_decision_is_the_same_ticket(live):
    coll, texts = live
    i, _, meta = coll.get("t5")
    coll.decide("t5", duplicate_of="t1")
    assert coll.add([texts[5]], [meta], ["t5"]) == [i]  # its metadata now holds the decision
    assert coll.add([texts[5]], [coll.get("t5")[2]], ["t5"]) == [i]  # or sent back with it
    with pytest.raises(KeyConflict):
        coll.add([texts[5]], [{**meta, "product": "other"}], ["t5"])
    with pytest.raises(KeyConflict):
        coll.add(["Another question entirely?"], [meta], ["t5"])
    assert len(coll) == N


@pytest.mark.parametrize("where", [None, *WHERES[:4]], ids=lambda w: json.dumps(w))
def test_pages_give_every_question_once_in_order(live, where):
    coll, _ = live
    coll.remove(["t1", "t2"])
    want = [
        (i, key, text, meta or {})
        for i, key, text, meta in coll.stored_rows()
        if matches(meta or {}, check_where(where))
    ]
    got, cursor, pages = [], None, 0
    while True:
        rows, cursor = coll.page(cursor, limit=37, where=where)
        got += rows
        pages += 1
        assert len(rows) <= 37
        if cursor is None:
            break
    assert got == want and pages == max(1, -(-len(want) // 37))


def test_a_search_leaves_out_the_keys_excluded(live):
    coll, texts = live
    k = 5
    for q in (3, 7, 11):
        full = coll.search([texts[q]], k=k + 2)[0]
        own = [h.key for h in full]
        got = coll.search([texts[q]], k=k, exclude=[f"t{q}", own[1]])[0]
        assert [h.key for h in got] == [key for key in own if key not in (f"t{q}", own[1])][:k]
    assert coll.search([texts[3]], k=2, exclude=["nobody"])[0][0].key == "t3"
    with pytest.raises(DupqError):
        coll.search([texts[3]], exclude=["has space"])


def test_bad_filters_are_one_sentence(live):
    coll, texts = live
    for where in ({"a b": 1}, {"x": []}, {"x": None}, {"x": [{"y": 1}]}, ["x"]):
        with pytest.raises(DupqError, match=r"^(a )?filter|^the filter"):
            coll.search(texts[:1], where=where)


def test_cli_keys_remove_update_where_and_decisions(location, tmp_path, tiny_model_dir):
    texts, keys, meta = desk(40)
    table = tmp_path / "desk.tsv"
    table.write_text(
        "id\tquestion\tproduct\n" + "".join(f"{k}\t{t}\t{m['product']}\n" for k, t, m in zip(keys, texts, meta))
    )
    folder = str(location)
    built = cli("index", "build", table, "--out", folder, "--model", tiny_model_dir, "--key-column", "id")
    assert built.exit_code == 0, built.output
    found = cli("search", folder, texts[6], "-k", "3", "--where", "product=drive", "--where", "product=chat")
    assert found.exit_code == 0 and "key t6" in found.output, found.output
    listed = re.findall(r"key (t\d+)", found.output)
    assert all(meta[int(k[1:])]["product"] in ("drive", "chat") for k in listed) and len(listed) == 3
    assert cli("index", "remove", folder, "t6").exit_code == 0
    gone = cli("search", folder, texts[6], "-k", "40", "--json")
    assert "t6" not in {h["key"] for h in json.loads(gone.output)["hits"]}
    unknown = cli("index", "remove", folder, "t6")
    assert unknown.exit_code != 0 and unknown.output.startswith("error: no question with the key 't6'")
    updated = cli("index", "update", folder, "t7", "--text", "Which river is the longest?")
    assert updated.exit_code == 0, updated.output
    top = json.loads(cli("search", folder, "Which river is the longest?", "-k", "1", "--json").output)
    assert top["hits"][0]["key"] == "t7"
    with Collection.open(folder) as coll:  # 10 decisions of each kind: the fewest a threshold is chosen on
        for i in range(10):
            coll.decide(f"t{10 + i}", duplicate_of=f"t{20 + i}")
            coll.decide(f"t{30 + i}", not_duplicate_of=f"t{20 + i}")
    pairs_file = tmp_path / "pairs.tsv"
    assert cli("index", "decisions", folder, "--out", pairs_file).exit_code == 0
    pairs, _ = read_pairs(pairs_file)
    assert sorted(zip(pairs.q1, pairs.q2, pairs.labels.tolist())) == sorted(
        [(texts[10 + i], texts[20 + i], 1) for i in range(10)] + [(texts[30 + i], texts[20 + i], 0) for i in range(10)]
    )
    model = tmp_path / "desk-model"
    shutil.copytree(tiny_model_dir, model)
    config = (model / "config.json").read_bytes()
    calibrated = cli("calibrate", model, "--pairs", pairs_file)
    # the tiny model scores every pair alike (ROC-AUC 0.5): a map fitted on its scores is no better than chance
    refused(calibrated, "no better than their share of duplicates")
    assert "ROC-AUC" in calibrated.output and "too few to trust" in calibrated.output, calibrated.output
    assert (model / "config.json").read_bytes() == config  # refused: the model as it was


TOKEN = "live-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def test_http_remove_update_filter_and_decide(location, tiny_model_dir):
    texts, keys, meta = desk(60)
    Collection.build(location, texts, Model.load(tiny_model_dir), keys=keys, metadata=meta).close()
    with TestClient(create_app(location, token=TOKEN)) as c:
        scoped = c.post("/search", json={"question": texts[4], "k": 5, "filter": {"product": ["mail", "chat"]}})
        assert scoped.status_code == 200
        assert all(h["metadata"]["product"] in ("mail", "chat") for h in scoped.json()["results"])
        assert scoped.json()["results"][0]["key"] == "t4"
        assert c.delete("/questions/t4").status_code == 401
        assert c.delete("/questions/t4", headers=AUTH).json()["count"] == 59
        assert c.delete("/questions/t4", headers=AUTH).status_code == 404
        after = c.post("/search", json={"question": texts[4], "k": 60}).json()["results"]
        assert "t4" not in {h["key"] for h in after}
        new = "Which river flows through the most countries?"
        assert c.put("/questions/t5", json={"text": new}, headers=AUTH).status_code == 200
        top = c.post("/search", json={"question": new, "k": 1}).json()["results"][0]
        assert (top["key"], top["text"]) == ("t5", new)
        assert c.put("/questions/none", json={"text": new}, headers=AUTH).status_code == 404
        decided = c.post("/questions/t8/decision", json={"duplicate_of": "t0"}, headers=AUTH)
        assert decided.status_code == 200, decided.text
        hits = c.post("/search", json={"question": texts[8], "k": 60}).json()["results"]
        assert {h["key"]: h["duplicate_of"] for h in hits if h["duplicate_of"]} == {"t8": "t0"}
        for bad_filter in ({"a b": 1}, {"product": []}, {"product": None}, {"n": 2**63}):  # check_where's rule
            bad = c.post("/search", json={"question": texts[8], "filter": bad_filter})
            assert bad.status_code == 422 and bad.json()["detail"][0]["loc"][:2] == ["body", "filter"], bad.text


BUILD = """
import json, sys
from dupq.modeling.model import Model
from dupq.collection.collection import Collection
texts, keys, meta = json.load(sys.stdin)
Collection.build(sys.argv[1], texts, Model.load(sys.argv[2]), keys=keys, metadata=meta, index=sys.argv[3]).close()
"""

CHILD = """
import sys
from dupq.collection.collection import Collection
with Collection.open(sys.argv[1]) as coll:
    for i in range({n}):
        if i % 3 == 2:
            coll.remove([f"t{{i}}"])
        else:
            coll.update(f"t{{i}}", text=f"What changed in release {{i}} of the help desk?")
        print(i, flush=True)
"""


def apply_once(coll: Collection, upto: int) -> None:
    """The child's operations, each applied unless it is already (what a retry after a crash does)."""
    for i in range(upto):
        if i % 3 == 2:
            try:
                coll.remove([f"t{i}"])
            except UnknownKey:  # removed before the crash
                pass
        else:
            coll.update(f"t{i}", text=f"What changed in release {i} of the help desk?")


@pytest.mark.slow
def test_kill_9_during_removals_and_updates_loses_nothing_and_applies_nothing_twice(location, tiny_model_dir):
    """kill -9 a process mid-way through removals and updates; then finish them: the state is exactly once each
    (a folder with an HNSW graph, whose rebuild past a fifth removed may be under way too, and milvus-lite).

    The collection is built in a process of its own: milvus-lite serves a file from one process at a
    time, until that process ends, so this one opens it only once the killed one is gone."""
    texts, keys, meta = desk()
    index = "flat" if str(location).startswith("milvus:") else "hnsw"
    build = [sys.executable, "-c", BUILD, str(location), str(tiny_model_dir), index]
    built = subprocess.run(build, input=json.dumps([texts, keys, meta]), capture_output=True, text=True)
    assert built.returncode == 0, built.stderr
    tiny_model = Model.load(tiny_model_dir)
    n = 300
    done = [int(line) for line in kill_9_when([sys.executable, "-c", CHILD.format(n=n), str(location)], 41)]
    with Collection.open(location, tiny_model) as coll:
        rows = {key: text for _, key, text, _ in coll.stored_rows()}
        for i in done:  # every acknowledged operation is there
            assert (f"t{i}" not in rows) if i % 3 == 2 else rows[f"t{i}"].startswith("What changed")
        apply_once(coll, n)
        final = coll.stored_rows()
        assert len(final) == len({key for _, key, _, _ in final}) == N - n // 3  # one row a key, each removal once
        changed = [f"What changed in release {i} of the help desk?" for i in range(n) if i % 3 != 2]
        for row in coll.search(changed[:5], k=N):  # every new text found once (the small model ties them all)
            assert sorted(h.text for h in row if h.text.startswith("What changed")) == sorted(changed)
        check_search(coll, texts[:5], 10, {"product": "mail"})


def test_metrics_count_requests_changes_and_follow_the_read_token(tmp_path, tiny_model_dir):
    texts, keys, meta = desk(30)
    Collection.build(tmp_path / "c", texts, Model.load(tiny_model_dir), keys=keys, metadata=meta).close()
    with TestClient(create_app(tmp_path / "c", token=TOKEN)) as c:
        before = c.get("/metrics")
        assert before.status_code == 200 and before.headers["content-type"].startswith("text/plain")
        for _ in range(3):
            c.post("/search", json={"question": texts[1], "k": 2})
        c.post("/search", json={"question": "", "k": 2})
        c.delete("/questions/t1", headers=AUTH)
        c.delete("/questions/t1", headers=AUTH)
        c.post("/questions", json={"text": "Which river is the longest?", "key": "r"}, headers=AUTH)
        after = c.get("/metrics").text
    delta = lambda name, **labels: metric(after, name, **labels) - metric(before.text, name, **labels)  # noqa: E731
    assert delta("dupq_requests_total", route="/search", method="POST", status="200") == 3
    assert delta("dupq_requests_total", route="/search", method="POST", status="422") == 1
    assert delta("dupq_requests_total", route="/questions/{key}", method="DELETE", status="404") == 1
    assert delta("dupq_request_seconds_count", route="/search") == 4
    assert delta("dupq_questions_removed_total") == 1 and delta("dupq_questions_added_total") == 1
    assert metric(after, "dupq_questions_stored") == 30
    assert 0 <= metric(after, "dupq_index_age_seconds") < 60
    with TestClient(create_app(tmp_path / "c", token=TOKEN, protect_reads=True)) as c:
        assert c.get("/metrics").status_code == 401 and c.get("/metrics", headers=AUTH).status_code == 200


def test_decisions_from_two_writers_at_once_are_all_kept(tmp_path, tiny_model):
    """Two handles (two workers) record decisions on one question at the same time: each decision reads the stored
    metadata and writes it back, so without one transaction around both a decision of one overwrites the other's."""
    texts, keys, meta = desk(80)
    folder = tmp_path / "c"
    Collection.build(folder, texts, tiny_model, keys=keys, metadata=meta).close()
    handles = [Collection.open(folder, tiny_model) for _ in range(2)]
    start = threading.Barrier(2)

    def judge(coll, others):
        start.wait()
        for other in others:
            coll.decide("t0", not_duplicate_of=other)

    with ThreadPoolExecutor(2) as pool:
        list(pool.map(judge, handles, [[f"t{i}" for i in range(1 + n, 61, 2)] for n in range(2)]))  # raises theirs
    for h in handles:
        h.close()
    with Collection.open(folder, tiny_model) as coll:
        assert sorted(coll.get("t0")[2]["not_duplicate_of"]) == sorted(f"t{i}" for i in range(1, 61))
