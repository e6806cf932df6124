"""``dupq-lab rerank-cost`` on a tiny fast model and a tiny reranker (two LSTM models) and synthetic questions."""

from __future__ import annotations

import pytest

from dupq.collection.rerank import RERANK_CANDIDATES
from dupq_lab.speed.rerank_cost import measure

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")  # platformdirs' note on XDG_RUNTIME_DIR


@pytest.mark.slow
def test_rerank_cost_times_each_first_search_on_fresh_candidates_and_serves_both_ways(
    small_splits, tiny_model_dir, head_model_dir, tmp_path
):
    corpus = list(dict.fromkeys(q for q in small_splits.pool.q1 if q.strip()))[:600]
    queries = [q for q in small_splits.test.q1 if q.strip()][:40]
    out = measure(corpus, queries, tiny_model_dir, str(head_model_dir), tmp_path, searches=3, clients=2, seconds=1.0)
    build = out["build"]
    assert build["plain_s"] > 0 and build["ratio"] == pytest.approx(build["rerank_s"] / build["plain_s"], rel=0.01)
    first, stored = out["first_search"], out["stored_search"]
    assert first["searches"] >= 2  # queries whose candidates no other timed query shares
    assert first["encoded_per_search_p50"] == RERANK_CANDIDATES  # each first search encoded all its candidates
    assert stored["searches"] == 3 * first["searches"] and stored["encoded"] == 0  # and then none again
    assert 0 < stored["cpu_p50_ms"] and 0 < first["cpu_p50_ms"]
    serve = out["serve"]
    for side in (serve["reranked"], serve["plain"]):
        assert side["per_s"] > 0 and side["errors"] == 0 and side["server_cpu_ms_per_search"] > 0, serve
    assert serve["per_s_ratio"] == pytest.approx(serve["reranked"]["per_s"] / serve["plain"]["per_s"], rel=0.01)
    assert set(out["targets"]) == {"build_ratio", "stored_search_p50_ms", "first_search_p50_ms", "serve_per_s"}
