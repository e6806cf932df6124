"""Star clustering against a naive reference over the full similarity matrix, and `dupq dedup`."""

from __future__ import annotations

import csv
import json

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from dupq.cli import app
from dupq.search.dedup import DedupConfig, dedup, star_clusters
from dupq.search.vectors import search


def naive_star(vectors: np.ndarray, threshold: float) -> list[list[int]]:
    """The same rule written plainly: every pair, Python loops, no k-NN cut-off."""
    n = len(vectors)
    sim = [[float(np.dot(vectors[i], vectors[j])) for j in range(n)] for i in range(n)]
    nbrs = [[j for j in range(n) if j != i and sim[i][j] > threshold] for i in range(n)]
    order = sorted(range(n), key=lambda i: (-len(nbrs[i]), i))
    taken: set[int] = set()
    clusters = []
    for c in order:
        if c in taken or not nbrs[c]:
            continue
        free = [j for j in nbrs[c] if j not in taken]
        if free:
            free.sort(key=lambda j: (-sim[c][j], j))
            clusters.append([c, *free])
            taken.update([c, *free])
    return clusters


def knn_clusters(vectors: np.ndarray, threshold: float) -> list[list[int]]:
    scores, ids = search(vectors, vectors, len(vectors))  # every neighbour: no cut-off
    return [c.members for c in star_clusters(scores, ids, threshold)]


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(1, 30), d=st.integers(1, 4), seed=st.integers(0, 2**16), threshold=st.sampled_from([0.0, 2.0, 4.5])
)
def test_star_clusters_equal_naive_reference(n, d, seed, threshold):
    vectors = np.random.default_rng(seed).integers(-2, 3, (n, d)).astype(np.float32)  # exact products, many ties
    assert knn_clusters(vectors, threshold) == naive_star(vectors, threshold)


def test_every_member_is_a_duplicate_of_its_representative_and_chains_break():
    # A chain on the unit circle, 30 degrees apart: each neighbour pair is above cos(35°) ~ 0.82,
    # but the ends are 90 degrees apart. Connected components would make one cluster of four.
    angles = np.radians([0, 30, 60, 90])
    v = np.stack([np.cos(angles), np.sin(angles)], 1).astype(np.float32)
    clusters = star_clusters(*search(v, v, 4), threshold=0.82)
    assert [c.members for c in clusters] == [[1, 0, 2]]  # 1 has two duplicates; 3 is left on its own
    for c in clusters:
        assert all(s > 0.82 for s in c.scores[1:]) and c.scores[0] == 1.0


def test_dedup_on_questions_of_the_small_split(small_splits, tiny_model):
    texts = list(dict.fromkeys(q for q in small_splits.pool.q1[:300] + small_splits.pool.q2[:300] if q.strip()))
    texts += texts[:5]  # exact repeats must land with their originals
    threshold = 0.9
    vectors = tiny_model.encode(texts)
    full = dedup(texts, tiny_model, DedupConfig(threshold=threshold, neighbours=len(texts)))
    # Members of equal similarity (a question and its exact repeat) may come in either order: FAISS and
    # numpy sum the same products in different orders, so their scores can differ in the last bit.
    assert [(c.members[0], sorted(c.members[1:])) for c in full] == [
        (c[0], sorted(c[1:])) for c in naive_star(vectors, threshold)
    ]
    for c in full:
        assert all(a >= b - 1e-6 for a, b in zip(c.scores[1:], c.scores[2:]))  # best first, up to that noise
    for i in range(5):
        assert any({i, len(texts) - 5 + i} <= set(c.members) for c in full)
    # With the default cut-off every member is still a duplicate of its representative.
    for c in dedup(texts, tiny_model, DedupConfig(threshold=threshold)):
        assert all(float(vectors[c.representative] @ vectors[m]) > threshold - 1e-6 for m in c.members)


def test_cli_dedup_writes_json_and_csv(tmp_path, tiny_model_dir):
    qfile = tmp_path / "q.txt"
    qfile.write_text("How do I learn Python?\nHow do I learn Python?\nWhy is the sky blue?\n\n")
    runner = CliRunner()
    result = runner.invoke(
        app,
        ["dedup", str(qfile), "--model", str(tiny_model_dir), "--threshold", "0.99", "--out", str(tmp_path / "d.json")],
    )
    assert result.exit_code == 0, result.output
    body = json.loads((tmp_path / "d.json").read_text())
    assert body["questions"] == 3 and body["threshold"] == 0.99
    assert [[m["index"] for m in c["members"]] for c in body["clusters"]] == [[0, 1]]
    result = runner.invoke(
        app,
        ["dedup", str(qfile), "--model", str(tiny_model_dir), "--threshold", "0.99", "--out", str(tmp_path / "d.csv")],
    )
    assert result.exit_code == 0, result.output
    rows = list(csv.DictReader((tmp_path / "d.csv").open()))
    assert [(r["cluster"], r["representative"], r["index"]) for r in rows] == [("0", "1", "0"), ("0", "0", "1")]
    result = runner.invoke(app, ["dedup", str(qfile), "--out", str(tmp_path / "d.txt")])
    assert result.exit_code == 2 and result.output.startswith("error: --out must end in .json or .csv")
