"""Faults of scoped search and of what a row's metadata may hold: a number filter on metadata a CSV gave as text,
U+0000 matched by its prefix, a control character that fails a Milvus search batched with good ones, and a
key of the wrong type read as an empty one.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from faultkit import AUTH, build, clean, client, dupq, synthetic

from support.errors import library_refuses

pytestmark = pytest.mark.faults


def test_typed_filters_on_text_metadata(tmp_path: Path):
    """`search --where priority=1` (and `active=true`, `year=2023`) on a collection built from a CSV, where every
    value is text: the hits whose metadata say so, not none."""
    texts = synthetic(10)
    table = tmp_path / "q.csv"
    rows = [f"{t},{i % 3},{'true' if i % 2 else 'false'},{2020 + i % 4}" for i, t in enumerate(texts)]
    table.write_text("question,priority,active,year\n" + "\n".join(rows) + "\n")
    clean(dupq("index", "build", str(table), "--out", str(tmp_path / "c")))
    for where, want in (("priority=1", {1, 4, 7}), ("active=true", {1, 3, 5, 7, 9}), ("year=2023", {3, 7})):
        run = clean(dupq("search", str(tmp_path / "c"), texts[0], "-k", "10", "--json", "--where", where))
        assert {h["id"] for h in json.loads(run.stdout)["hits"]} == want, (where, run.stdout)


def test_nul_in_metadata_and_filters(tmp_path: Path):
    """Metadata holding U+0000 (`"acme\\u0000evil"`, found by the filter `"acme"` through SQLite's json_extract) is
    refused on the way in, by the library and the API; so is a filter holding it."""
    from dupq.collection.collection import Collection

    folder = build(tmp_path / "c", n=10, keys=True)
    with Collection.open(folder) as coll:
        assert library_refuses(lambda: coll.add(synthetic(1, 50), metadata=[{"tenant": "acme\u0000evil"}]))
        assert library_refuses(lambda: coll.update("k1", metadata={"note": ["a", {"b": "x\u0000"}]}))
        assert library_refuses(lambda: coll.add(synthetic(1, 51), metadata=[{"a\u0000b": 1}]))
        assert library_refuses(lambda: coll.search(synthetic(1), where={"tenant": "acme\u0000"}))
    with client(folder) as c:
        added = c.post("/questions", json={"text": synthetic(1, 60)[0], "metadata": {"t": "a\u0000"}}, headers=AUTH)
        found = c.post("/search", json={"question": synthetic(1)[0], "filter": {"tenant": "acme\u0000"}})
    assert 400 <= added.status_code < 500 and 400 <= found.status_code < 500, (added.text, found.text)


def test_control_characters_in_filters(tmp_path: Path):
    """A filter value holding a control character is the request's own 4xx, answered before it joins a batch: the
    good searches sent with it are answered 200 (on Milvus they were all 503)."""
    folder = build(tmp_path / "c", n=20, metadata=True)
    with client(folder) as c:

        def search(i: int):
            value = "a\u0001b" if i == 0 else i
            return c.post("/search", json={"question": synthetic(1, i)[0], "filter": {"row": value}}).status_code

        with ThreadPoolExecutor(8) as pool:
            codes = list(pool.map(search, range(16)))
    assert 400 <= codes[0] < 500 and codes[1:] == [200] * 15, codes


def test_control_characters_in_a_milvus_filter(tmp_path: Path):
    """On milvus-lite, a control character in a filter value is the caller's one sentence, not a store failure."""
    from dupq.collection.collection import Collection
    from dupq.collection.rows import StoreFailure
    from dupq.core.errors import DupqError
    from dupq.modeling.model import Model
    from support.servicekit import milvus_or_skip

    location = milvus_or_skip(tmp_path / "c.db")
    texts = synthetic(10)
    with Collection.build(location, texts, Model.load(), metadata=[{"row": f"r{i}"} for i in range(10)]) as coll:
        for value in ("a\u0001b", "a\nb", "a\u007fb"):
            with pytest.raises(DupqError) as refused:
                coll.search(texts[:1], where={"row": value})
            assert not isinstance(refused.value, StoreFailure), refused.value
        assert [h.metadata for h in coll.search(texts[:1], k=1, where={"row": "r0"})[0]] == [{"row": "r0"}]


def test_jsonl_key_of_another_type(tmp_path: Path):
    """A JSON lines key `true` (or a list) is skipped saying what it is, not as an "empty key"."""
    lines = [{"id": True, "question": synthetic(1)[0]}, {"id": [1], "question": synthetic(1, 1)[0]}]
    lines += [{"id": "q3", "question": synthetic(1, 2)[0]}]
    (tmp_path / "q.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    run = clean(dupq("index", "build", str(tmp_path / "q.jsonl"), "--out", str(tmp_path / "c"), "--key-column", "id"))
    assert b"empty key" not in run.stderr and b"boolean" in run.stderr and b"list" in run.stderr, run.stderr
