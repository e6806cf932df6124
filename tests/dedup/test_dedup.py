"""Deduplication: each grouping against a naive reference, the partitioned search against brute force over
the lists a query probes, and `dupq dedup` end to end (formats, keys, resuming a killed run, bad input)."""

from __future__ import annotations

import csv
import itertools
import json
import socket

import numpy as np
import pytest
from dedupkit import check_streamed_as_in_memory, member_sets, naive_star, pool_texts, run_cli
from hypothesis import given, settings
from hypothesis import strategies as st

from dupq.collection.collection import Collection
from dupq.core.errors import DupqError
from dupq.core.files import check_apart
from dupq.dedup import candidates
from dupq.dedup import run as dedup_run
from dupq.dedup.candidates import CandidateConfig, neighbour_blocks, probes, train_centroids
from dupq.dedup.clusters import Edges, components, leader, star
from dupq.dedup.grouping import DedupConfig, dedup, same_text
from support.errors import refused


def edges_above(vectors: np.ndarray, threshold: float) -> Edges:
    s = vectors @ vectors.T
    a, b = np.nonzero(np.triu(s > threshold, 1))
    return Edges(a, b, s[a, b].astype(np.float32))


def naive_components(vectors: np.ndarray, threshold: float) -> list[set[int]]:
    """Every pair above ``threshold`` joins the groups of its two questions: the groups of two or more."""
    groups = [{i} for i in range(len(vectors))]
    for i, j in itertools.combinations(range(len(vectors)), 2):
        a, b = next(g for g in groups if i in g), next(g for g in groups if j in g)
        if float(vectors[i] @ vectors[j]) > threshold and a is not b:
            groups.remove(b)
            a |= b
    return sorted((g for g in groups if len(g) > 1), key=min)


def naive_leader(vectors: np.ndarray, threshold: float) -> dict[int, int]:
    """SemHash's rule: in input order, join the most similar earlier leader among the earlier neighbours'."""
    leader_of: dict[int, int] = {}
    for i in range(len(vectors)):
        sim = {j: float(vectors[i] @ vectors[j]) for j in range(i)}
        leaders = {leader_of[j] for j in sim if sim[j] > threshold}
        ok = [(sim[c], -c) for c in leaders if sim[c] > threshold]
        leader_of[i] = -max(ok)[1] if ok else i
    return leader_of


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 30), d=st.integers(1, 4), seed=st.integers(0, 2**16), t=st.sampled_from([0.0, 2.0, 4.5]))
def test_groupings_equal_naive_references(n, d, seed, t):
    vectors = np.random.default_rng(seed).integers(-2, 3, (n, d)).astype(np.float32)  # exact products, many ties
    e = edges_above(vectors, t)
    sim = [[float(vectors[i] @ vectors[j]) for j in range(n)] for i in range(n)]
    assert sorted(g.tolist() for g in star(e, n).groups()) == sorted([c, *m] for c, m in naive_star(sim, t).items())
    assert sorted((set(g.tolist()) for g in components(e, n).groups()), key=min) == naive_components(vectors, t)
    got, ref = leader(e, n), naive_leader(vectors, t)
    for i, rep in ref.items():
        if any(ref[j] == rep for j in range(n) if j != rep):  # its leader leads others: a group
            assert got.label[i] == got.label[rep] >= 0 and got.representative[rep]
        else:
            assert got.label[i] == -1


def test_star_breaks_chains_that_components_join():
    # On the unit circle 30 degrees apart: neighbours are above cos(35°) ~ 0.82, the ends 90 degrees apart.
    angles = np.radians([0, 30, 60, 90])
    v = np.stack([np.cos(angles), np.sin(angles)], 1).astype(np.float32)
    e = edges_above(v, 0.82)
    assert [g.tolist() for g in star(e, 4).groups()] == [[1, 0, 2]]
    assert [sorted(g.tolist()) for g in components(e, 4).groups()] == [[0, 1, 2, 3]]


def unit(n: int, d: int, seed: int) -> np.ndarray:
    v = np.random.default_rng(seed).normal(size=(n, d)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


@pytest.mark.parametrize("exact_below", [10_000, 100])
def test_candidates_equal_brute_force_over_the_lists_probed(exact_below):
    v = unit(1500, 8, 0)
    config = CandidateConfig(neighbours=5, exact_below=exact_below, list_size=50, nprobe=3)
    rows_seen = []
    if config.partitioned(len(v)):
        probed = probes(v, train_centroids(v, config), config.nprobe)
    for rows, scores, ids in neighbour_blocks(v, config, block=400):
        rows_seen.extend(rows.tolist())
        for r, s, i in zip(rows, scores, ids):
            allowed = np.arange(len(v))
            if config.partitioned(len(v)):
                allowed = np.flatnonzero(np.isin(probed[:, 0], probed[r]))  # the lists r probes
            ref = sorted(allowed, key=lambda j: (-float(v[r] @ v[j]), j))[:6]
            assert set(i.tolist()) == set(ref) or np.allclose(np.sort(s), np.sort(v[ref] @ v[r]), atol=1e-6)
    assert sorted(rows_seen) == list(range(len(v)))


@pytest.mark.parametrize("flat_lists", [4096, 8])  # 8: the centroids searched through the graph and the nested lists
def test_partitioned_search_finds_near_duplicates(flat_lists, monkeypatch):
    monkeypatch.setattr(candidates, "FLAT_LISTS", flat_lists)
    base = unit(2000, 16, 1)
    noisy = base + 0.02 * np.random.default_rng(2).normal(size=base.shape).astype(np.float32)
    v = np.concatenate([base, noisy / np.linalg.norm(noisy, axis=1, keepdims=True)])
    config = CandidateConfig(neighbours=3, exact_below=100, list_size=64, nprobe=4)
    found = {(int(r), int(i[1])) for rows, _, ids in neighbour_blocks(v, config) for r, i in zip(rows, ids)}
    twins = sum((i, i + 2000) in found or (i + 2000, i) in found for i in range(2000))
    assert twins >= 0.99 * 2000


def test_dedup_in_memory_matches_star_on_the_judged_pairs(small_splits, tiny_model):
    texts = pool_texts(small_splits, 300)
    texts += texts[:5]  # exact repeats land with their originals
    vectors = tiny_model.encode(texts)
    config = DedupConfig(threshold=0.9)
    config.candidates.neighbours = len(texts)
    got = dedup(texts, tiny_model, config)
    same = Edges(np.arange(5), np.arange(len(texts) - 5, len(texts)), np.ones(5, np.float32))
    ref = star(Edges.join([edges_above(vectors, 0.9), same]), len(texts))
    assert member_sets(got) == member_sets(ref)
    for i in range(5):
        assert got.label[i] == got.label[len(texts) - 5 + i] >= 0


@pytest.mark.parametrize("exact_below", [10_000, 200])  # exact search, and k-means partitions
def test_in_memory_and_streamed_runs_group_alike(small_splits, tiny_model, tmp_path, exact_below):
    """One plan, one block function: dedup() in memory and a streamed run give the same groups and scores."""
    texts = pool_texts(small_splits, 400)
    texts += texts[:7]  # exact repeats, found by their hashes in both
    config = DedupConfig(threshold=0.9)
    config.candidates.exact_below, config.candidates.list_size = exact_below, 50
    memory = dedup(texts, tiny_model, config)
    records = [dedup_run.Record(t, str(i)) for i, t in enumerate(texts)]
    dedup_run.run(records, tmp_path / "run.csv", tiny_model, config, {"f": 1})
    check_streamed_as_in_memory(tmp_path / "run.csv", memory)
    assert memory.count > 7


def test_same_text_equals_a_naive_reference():
    texts = ["a", "b", "a", "c", "b", "a", "", ""]
    first = {t: texts.index(t) for t in texts}
    naive = {(first[t], i) for i, t in enumerate(texts) if first[t] != i}
    edges = same_text(texts)
    assert set(zip(edges.a.tolist(), edges.b.tolist())) == naive and set(edges.score.tolist()) == {1.0}


QUESTIONS = ["How do I learn Python?", "How do I learn Python?", "Why is the sky blue?", "", "How can I learn python"]
ROWS = [{"id": f"faq-{i}", "question": q, "tag": "x"} for i, q in enumerate(QUESTIONS)]


def write_csv(path) -> None:
    """``ROWS`` as a CSV file with a header."""
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, ["id", "question", "tag"])
        w.writeheader()
        w.writerows(ROWS)


def test_cli_writes_csv_jsonl_and_parquet_with_keys(tmp_path, tiny_model_dir):
    pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    qfile = tmp_path / "q.csv"
    write_csv(qfile)
    outs = {}
    for suffix in ("csv", "jsonl", "parquet"):
        out = tmp_path / f"d.{suffix}"
        r = run_cli(qfile, "--key-column", "id", "--model", tiny_model_dir, "--threshold", "0.99", "--out", out)
        assert r.exit_code == 0, r.output
        assert "skipped 1 line(s)" in r.output and "1 of the very same text" in r.output
        outs[suffix] = out
    rows = list(csv.DictReader(outs["csv"].open()))
    assert [(r["cluster"], r["representative"], r["key"], r["score_is"]) for r in rows][:2] == [
        ("0", "1", "faq-0", "similarity"),
        ("0", "0", "faq-1", "similarity"),
    ]
    lines = [json.loads(x) for x in outs["jsonl"].read_text().splitlines()]
    assert [(x["key"], x["representative"]) for x in lines] == [(r["key"], int(r["representative"])) for r in rows]
    table = pq.read_table(outs["parquet"]).to_pylist()
    assert [x["key"] for x in table] == [r["key"] for r in rows]
    assert not list(tmp_path.glob("*.work"))  # the work folder is gone after the output is written


def test_cli_keys_default_to_line_numbers_and_bad_input_is_one_sentence(tmp_path, tiny_model_dir):
    qfile = tmp_path / "q.txt"
    qfile.write_text("\n".join(QUESTIONS) + "\n")
    r = run_cli(qfile, "--model", tiny_model_dir, "--threshold", "0.99", "--out", tmp_path / "d.csv")
    assert r.exit_code == 0, r.output
    assert [x["key"] for x in csv.DictReader((tmp_path / "d.csv").open())] == ["1", "2"]
    for args, start in (
        ((qfile, "--out", tmp_path / "d.txt"), "error: --out must end in .csv, .jsonl, .json or .parquet"),
        ((tmp_path / "none.txt", "--out", tmp_path / "e.csv"), "error: the questions file"),
        (("--out", tmp_path / "e.csv"), "error: Missing argument"),
        ((qfile, "--key-column", "id", "--out", tmp_path / "e.csv"), "error: --column and --key-column need"),
        ((qfile, "--out", tmp_path / "missing" / "e.csv"), "error: cannot write"),
    ):
        r = run_cli(*args)
        assert refused(r).startswith(start), r.output
    dup = tmp_path / "k.csv"
    dup.write_text("id,question\na,How?\na,Why?\n")
    r = run_cli(dup, "--key-column", "id", "--model", tiny_model_dir, "--out", tmp_path / "e.csv")
    refused(r, "the key 'a' names two questions")
    assert not (tmp_path / "e.csv").exists()


class Killed(Exception):
    pass


@pytest.mark.parametrize("stage", ["encode", "search"])
def test_a_killed_run_resumes_and_writes_what_an_uninterrupted_run_writes(
    tmp_path, tiny_model, small_splits, monkeypatch, stage
):
    texts = pool_texts(small_splits, 1500)
    records = lambda: (dedup_run.Record(t, str(i)) for i, t in enumerate(texts))  # noqa: E731
    monkeypatch.setattr(dedup_run, "ENCODE_CHUNK", 200)
    monkeypatch.setattr(dedup_run, "SEARCH_BLOCK", 300)
    config = DedupConfig(threshold=0.9)
    config.candidates.exact_below = 500  # partitioned
    whole = dedup_run.run(records(), tmp_path / "whole.csv", tiny_model, config, {"f": 1})
    calls = []

    def kill_midway(s, done, total):
        calls.append(s)
        if s == stage and calls.count(s) == 3:
            raise Killed

    with pytest.raises(Killed):
        dedup_run.run(records(), tmp_path / "part.csv", tiny_model, config, {"f": 1}, progress=kill_midway)
    assert not (tmp_path / "part.csv").exists() and (tmp_path / "part.csv.work").is_dir()
    seen = []
    again = dedup_run.run(
        records(), tmp_path / "part.csv", tiny_model, config, {"f": 1}, progress=lambda s, d, t: seen.append((s, d))
    )
    assert again.resumed_from == stage
    assert min(d for s, d in seen if s == stage) > 0  # went on from the recorded chunk, not from zero
    assert (tmp_path / "part.csv").read_bytes() == (tmp_path / "whole.csv").read_bytes()
    assert whole.clusters > 0


def test_a_changed_run_starts_over(tmp_path, tiny_model):
    texts = ["How do I learn Python?", "How can I learn Python?", "Why is the sky blue?"]
    out = tmp_path / "d.csv"
    (tmp_path / "d.csv.work").mkdir()
    (tmp_path / "d.csv.work" / "mine.txt").write_text("not dupq's")
    recs = [dedup_run.Record(t, str(i)) for i, t in enumerate(texts)]
    with pytest.raises(Exception, match="in the way of the run's work folder"):
        dedup_run.run(recs, out, tiny_model, DedupConfig(), {"f": 1})
    (tmp_path / "d.csv.work" / "mine.txt").unlink()
    assert dedup_run.run(recs, out, tiny_model, DedupConfig(threshold=0.5), {"f": 1}).resumed_from is None
    assert dedup_run.run(recs, out, tiny_model, DedupConfig(threshold=0.6), {"f": 2}).resumed_from is None


def test_cli_groups_a_collections_questions_with_their_keys(tmp_path, tiny_model):
    texts = ["How do I learn Python?", "How do I learn Python?", "Why is the sky blue?", "How can I learn python"]
    Collection.build(tmp_path / "c", texts, tiny_model, keys=["a", "b", "c", "d"]).close()
    r = run_cli(tmp_path / "c", "--threshold", "0.99", "--out", tmp_path / "d.csv")
    assert r.exit_code == 0, r.output
    rows = list(csv.DictReader((tmp_path / "d.csv").open()))
    assert sorted(x["key"] for x in rows) == ["a", "b"] and "1 of the very same text" in r.output


def test_jsonl_and_parquet_inputs_read_as_the_csv_does(tmp_path):
    pytest.importorskip("pyarrow")
    import pyarrow as pa
    import pyarrow.parquet as pq

    from dupq.data.questions import read_questions

    (tmp_path / "q.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ROWS) + "not json\n[1]\n")
    pq.write_table(pa.Table.from_pylist(ROWS), tmp_path / "q.parquet")
    write_csv(tmp_path / "q.csv")
    ref = read_questions(tmp_path / "q.csv", key_column="id")
    for name in ("q.jsonl", "q.parquet"):
        got = read_questions(tmp_path / name, key_column="id")
        assert (got.texts, got.keys, got.metadata) == (ref.texts, ref.keys, ref.metadata)
    assert read_questions(tmp_path / "q.jsonl", key_column="id").dropped.count == 3  # empty, not JSON, not an object
    with pytest.raises(Exception, match="has no column 'title'"):
        list(read_questions(tmp_path / "q.parquet", column="title"))


def test_a_ray_address_out_of_reach_is_one_sentence():
    from dupq.dedup.ray_engine import _reachable

    # a "cluster" on the loopback address only, as `ray start --node-ip-address 127.0.0.1`
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        address = f"127.0.0.1:{listener.getsockname()[1]}"
        _reachable(address, lambda: "127.0.0.1")  # Ray dials the address as given: reachable
        with pytest.raises(DupqError, match="listens on the loopback address only, and Ray dials .* 127.0.0.2"):
            _reachable(address, lambda: "127.0.0.2")  # Ray dials the machine's address instead, where nothing listens
    with pytest.raises(DupqError, match="cannot reach a Ray cluster at 127.0.0.1:"):
        _reachable(address, lambda: "127.0.0.1")  # nothing listens any more


def test_dedup_collection_reads_a_living_collection_by_id(tmp_path, tiny_model):
    """The library's collection source: after a remove and a text update, the groups are those of the stored
    questions, keyed by key, as a file of the same questions gives them."""
    texts = ["How do I learn Python?", "Why is the sky blue?", "How do I learn Python?", "How do I cook rice?"]
    out = tmp_path / "d.jsonl"
    with Collection.build(tmp_path / "c", texts, tiny_model, keys=["a", "b", "c", "d"]) as coll:
        coll.remove(["a"])
        coll.update("d", text="Why is the sky blue?")
        summary = dedup_run.dedup_collection(coll, out, DedupConfig(threshold=0.99))
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert summary.questions == 3 and sorted(r["key"] for r in rows) == ["b", "d"]
    (tmp_path / "q.txt").write_text("Why is the sky blue?\nHow do I learn Python?\nWhy is the sky blue?\n")
    from_file = dedup_run.dedup_file(tmp_path / "q.txt", tmp_path / "f.jsonl", tiny_model, DedupConfig(threshold=0.99))
    assert (from_file.clusters, from_file.duplicates) == (summary.clusters, summary.duplicates)


def test_an_output_is_never_an_input(tmp_path):
    """check_apart: the same file by another spelling, a link or a hard link; inside an input folder; holding one."""
    (tmp_path / "sub").mkdir()
    (tmp_path / "a.csv").write_text("x\n")
    (tmp_path / "link.csv").symlink_to(tmp_path / "a.csv")
    (tmp_path / "hard.csv").hardlink_to(tmp_path / "a.csv")
    for out, source in [
        (tmp_path / "sub" / ".." / "a.csv", tmp_path / "a.csv"),
        (tmp_path / "link.csv", tmp_path / "a.csv"),
        (tmp_path / "hard.csv", tmp_path / "a.csv"),
        (tmp_path / "sub" / "out.csv", tmp_path / "sub"),
        (tmp_path, tmp_path / "a.csv"),
    ]:
        with pytest.raises(DupqError, match="which this command reads"):
            check_apart(out, None, source)
    check_apart(tmp_path / "b.csv", tmp_path / "a.csv", tmp_path / "sub", None)
