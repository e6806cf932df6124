"""`dupq dedup --rerank`: the fast model proposes candidate pairs, a second model judges them.

The reference is brute force: every question's candidates by the fast model's cosine over all the
others (a sort of the full matrix), each pair re-scored in a Python loop by the reranker's cosine (its
vectors encoded once per question) and judged by the reranker (the cosine at the threshold, or the
reranker's own verdict on the two texts), the duplicates grouped by the same star rule.
"""

from __future__ import annotations

import numpy as np
import pytest
from dedupkit import check_streamed_as_in_memory, member_sets, pool_texts, run_cli

import dupq.dedup.run as dedup_run
from dupq.collection.collection import Collection
from dupq.dedup import dedup as face
from dupq.dedup.candidates import plan
from dupq.dedup.clusters import Edges, star
from dupq.dedup.grouping import DedupConfig, dedup, search_blocks
from support.errors import refused

NEIGHBOURS = 5


def texts_of(splits, n: int = 300) -> list[str]:
    """Distinct questions of the pool whose words differ (two texts one vector would tie in any order)."""
    return list({" ".join(sorted(t.lower().rstrip("?").split())): t for t in pool_texts(splits, n)}.values())


def brute_force_edges(texts, fast, reranker, threshold: float | None, k: int = NEIGHBOURS) -> set[tuple[int, int]]:
    """The duplicate pairs ``(i, j)``, ``i < j`` (found from either side): candidates by the fast model's full cosine matrix, each judged in a
    loop by the reranker (its cosine above ``threshold``; None: the reranker's own verdict on the two texts)."""
    v, r = fast.encode(texts), reranker.encode(texts)  # (N, d), (N, d')
    found = set()
    for i in range(len(texts)):
        order = np.argsort(-(v @ v[i]), kind="stable")[: k + 1]  # its k + 1 best, itself among them
        for j in order[order != i]:
            if threshold is None:
                duplicate = bool(reranker.is_duplicate(texts[i], texts[int(j)]))
            else:
                duplicate = float(np.dot(r[i], r[j])) > threshold
            if duplicate:
                found.add((min(i, int(j)), max(i, int(j))))
    return found


@pytest.mark.parametrize("threshold", [0.8, None])  # the reranker's cosine at a threshold; its own calibrated verdict
def test_reranked_edges_equal_a_brute_force_reference(small_splits, tiny_model, head_model, threshold):
    texts = texts_of(small_splits)
    config = DedupConfig(threshold=threshold, on=None if threshold is None else "similarity")
    config.candidates.neighbours = NEIGHBOURS
    vectors, reranked = tiny_model.encode(texts), head_model.encode(texts)
    edges = Edges.join(
        [e for _, e in search_blocks(head_model, config, vectors, plan(vectors, config.candidates), reranked=reranked)]
    )
    got = {(int(a), int(b)) for a, b in zip(edges.a, edges.b)}
    assert got == brute_force_edges(texts, tiny_model, head_model, threshold) and got
    # and not the fast model's own verdict: the reranker decides
    own = Edges.join([e for _, e in search_blocks(tiny_model, config, vectors, plan(vectors, config.candidates))])
    assert {(int(a), int(b)) for a, b in zip(own.a, own.b)} != got


def test_reranked_groups_are_the_star_groups_of_the_reference_pairs(small_splits, tiny_model, head_model):
    texts = texts_of(small_splits)
    config = DedupConfig(threshold=0.8, on="similarity")
    config.candidates.neighbours = NEIGHBOURS
    got = dedup(texts, tiny_model, config, reranker=head_model)
    r = head_model.encode(texts)
    pairs = sorted(brute_force_edges(texts, tiny_model, head_model, 0.8))
    a, b = np.array(pairs).T
    ref = star(Edges(a, b, np.array([r[i] @ r[j] for i, j in pairs], np.float32)), len(texts))
    assert member_sets(got) == member_sets(ref) and got.count > 0
    assert np.allclose(got.score[got.label >= 0], ref.score[ref.label >= 0], atol=1e-5)  # scored by the reranker


@pytest.mark.parametrize("exact_below", [10_000, 200])  # exact search, and k-means partitions
def test_streamed_reranked_run_groups_as_in_memory_and_resumes(
    small_splits, tiny_model, head_model, tmp_path, monkeypatch, exact_below
):
    texts = texts_of(small_splits, 400)
    config = DedupConfig()
    config.candidates.exact_below, config.candidates.list_size = exact_below, 50
    memory = dedup(texts, tiny_model, config, reranker=head_model)
    records = lambda: (dedup_run.Record(t, str(i)) for i, t in enumerate(texts))  # noqa: E731
    monkeypatch.setattr(dedup_run, "ENCODE_CHUNK", 100)

    def kill_in_rerank(stage, done, total):
        if stage == "rerank" and done >= 200:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        dedup_run.run(
            records(), tmp_path / "r.csv", tiny_model, config, {"f": 1}, progress=kill_in_rerank, reranker=head_model
        )
    encoded = []
    summary = dedup_run.run(
        records(), tmp_path / "r.csv", tiny_model, config, {"f": 1}, reranker=head_model,
        progress=lambda s, d, t: encoded.append((s, d)),
    )  # fmt: skip
    assert summary.resumed_from == "encode" and min(d for s, d in encoded if s == "rerank") >= 200
    assert not any(s == "encode" for s, _ in encoded)  # the fast model's vectors were done: not encoded again
    assert summary.threshold == head_model.threshold and summary.score_is == head_model.threshold_on
    check_streamed_as_in_memory(tmp_path / "r.csv", memory)
    assert memory.count > 0


def test_a_collections_reranker_judges_unless_told_not_to(small_splits, tiny_model, head_model, tmp_path):
    texts = texts_of(small_splits, 150)
    config = DedupConfig()
    with Collection.build(tmp_path / "c", texts, tiny_model, rerank=head_model) as coll:
        assert not coll.stored_reranker_vectors()  # lazy: none encoded yet
        reranked = face(coll)
        assert len(coll.stored_reranker_vectors()) == len(texts)  # encoded once, kept for its searches too
        plain = face(coll, rerank=False)
    expected = dedup(texts, tiny_model, config, reranker=head_model)
    assert reranked.label.tolist() == expected.label.tolist()
    assert plain.label.tolist() == dedup(texts, tiny_model, config).label.tolist()
    assert reranked.label.tolist() != plain.label.tolist()

    for extra, judge in (([], head_model), (["--no-rerank"], tiny_model)):
        r = run_cli(tmp_path / "c", "--out", tmp_path / f"d{len(extra)}.csv", *extra)
        assert r.exit_code == 0, r.output
        assert f"> {judge.threshold:.2f}" in r.output
    assert refused(run_cli(tmp_path / "c", "--out", tmp_path / "x.csv", "--rerank", "m", "--no-rerank"), "contradict")


def test_cli_rerank_on_a_file_and_ray_refused(small_splits, tiny_model_dir, head_model_dir, head_model, tmp_path):
    texts = texts_of(small_splits, 150)
    (tmp_path / "q.txt").write_text("\n".join(texts) + "\n")
    r = run_cli(tmp_path / "q.txt", "--out", tmp_path / "d.csv", "--model", tiny_model_dir, "--rerank", head_model_dir)
    assert r.exit_code == 0, r.output
    assert f"{head_model.threshold_on} > {head_model.threshold:.2f}" in r.output

    class NoReranking(dedup_run.Local):
        reranks = False

    records = [dedup_run.Record(t, str(i)) for i, t in enumerate(texts)]
    with pytest.raises(Exception, match="on this machine only") as e:
        dedup_run.run(
            records, tmp_path / "e.csv", head_model, DedupConfig(), {"f": 1}, engine=NoReranking(), reranker=head_model
        )
    assert str(e.value).count(". ") == 0 and not (tmp_path / "e.csv.work").exists()
