"""A collection damaged row by row, the way another writer (or a disk) could damage it.

One row's damage never fails every search (a damaged row is left out, with a warning, and the rest are found);
damage that would make answers silently wrong is refused on open with one sentence. A row whose text is not
UTF-8, a read-only mount and a store another process holds are met as a user meets them, in
tests/faults/test_collection_faults.py. A test here that takes ``folder`` is also run against a deliberately
broken dupq by tests/faults/test_mutations.py.
"""

from __future__ import annotations

import json
import math
import shutil
import sqlite3
from pathlib import Path

import numpy as np
import pytest
from collkit import TOPICS
from fastapi.testclient import TestClient

from dupq.collection.collection import Collection
from dupq.collection.folder.backend import DATABASE, INDEX_FILE
from dupq.core.errors import DupqError
from dupq.core.nesting import MAX_DEPTH
from dupq.modeling.model import Model
from support.errors import refused
from support.kit import cli

TEXTS = [f"How do I learn about {TOPICS[i % 10]} in step {i}?" for i in range(40)]


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    """40 keyed questions with metadata ``{"row": i}``, built with the bundled model."""
    folder = tmp_path_factory.mktemp("damage") / "c"
    model = Model.load()
    assert len({v.tobytes() for v in model.encode(TEXTS)}) == len(TEXTS)  # so a search tells each question apart
    keys, meta = [f"k{i}" for i in range(40)], [{"row": i} for i in range(40)]
    Collection.build(folder, TEXTS, model, keys=keys, metadata=meta).close()
    return folder


@pytest.fixture
def folder(built, tmp_path) -> Path:
    return shutil.copytree(built, tmp_path / "c")


def sql(folder: Path, statement: str, *params) -> None:
    with sqlite3.connect(folder / DATABASE) as db:
        db.execute(statement, params)


def test_a_nan_embedding_is_refused_on_open(folder):
    """A NaN vector matches no query: a collection that holds one is refused, naming the question, not opened."""
    (folder / INDEX_FILE).unlink()  # the index is rebuilt from the stored rows
    with sqlite3.connect(folder / DATABASE) as db:
        start, count, blob = db.execute(
            "SELECT start, count, vectors FROM embeddings WHERE start <= 9 ORDER BY start DESC LIMIT 1"
        ).fetchone()
        vectors = np.frombuffer(blob, np.float32).reshape(count, -1).copy()
        vectors[9 - start, 3] = math.nan
        db.execute("UPDATE embeddings SET vectors = ? WHERE start = ?", (vectors.tobytes(), start))
    refused(cli("search", folder, TEXTS[9]), "question 9")
    with pytest.raises(DupqError, match="question 9 holds NaN or infinity"):
        Collection.open(folder)


DAMAGED = {3: "{bad", 4: "[1, 2]", 5: '{"score": NaN}', 6: '{"a": ' + "[" * 300 + "]" * 300 + "}", 8: "[" * 100_000}


def test_damaged_metadata_is_left_out_not_a_traceback_or_500(folder):
    """Metadata that is not JSON, a list on a keyed row, NaN, or nested too deep: every search still answers, with
    that metadata left out (the key kept) and a warning."""
    for i, text in DAMAGED.items():
        sql(folder, "UPDATE questions SET metadata = ? WHERE id = ?", text, i)
    want = {i: (f"k{i}", {}) for i in DAMAGED} | {7: ("k7", {"row": 7})}  # row 7 is intact
    queries = folder.parent / "q.txt"
    queries.write_text("\n".join(TEXTS[i] for i in want) + "\n")
    result = cli("search", folder, "--queries", queries, "-k", "1", "--json")
    assert result.exit_code == 0, result.output
    hits = [json.loads(line)["hits"][0] for line in result.stdout.splitlines()]
    assert {h["id"]: (h["key"], h["metadata"]) for h in hits} == want
    for i in DAMAGED:
        assert f"warning: the metadata of question {i} is damaged" in result.stderr
    with Collection.open(folder) as coll:
        assert {h[0].id: (h[0].key, h[0].metadata) for h in coll.search([TEXTS[i] for i in want], k=1)} == want
    from dupq.service.app import create_app

    with TestClient(create_app(folder, token="t")) as client:
        for i, (key, metadata) in want.items():
            (hit,) = client.post("/search", json={"question": TEXTS[i], "k": 1}).json()["results"]
            assert (hit["id"], hit["key"], hit["metadata"]) == (i, key, metadata)


def test_metadata_deeper_than_the_limit_is_refused_on_the_way_in(folder):
    metadata: dict = {}
    for _ in range(MAX_DEPTH - 1):
        metadata = {"a": metadata}  # MAX_DEPTH levels: the limit itself is stored
    with Collection.open(folder) as coll:
        (i,) = coll.add(["How deep may metadata nest?"], metadata=[metadata])
        assert coll.search(["How deep may metadata nest?"], k=1)[0][0].metadata == metadata
        with pytest.raises(DupqError, match=f"nests more than {MAX_DEPTH} levels"):
            coll.add(["Is this too deep?"], metadata=[{"a": metadata}])
        assert len(coll) == i + 1
