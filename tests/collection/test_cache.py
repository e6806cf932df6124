"""A folder collection held by several processes (``dupq serve --workers``): its hits' vectors in one read,
``index.faiss`` written under a lock, adds handed from writer to writer by a lock, recorded HNSW settings."""

from __future__ import annotations

import json
import threading
import time

import faiss
import numpy as np
import pytest
from collkit import check_search

import dupq.collection.folder.cache as cache_module
import dupq.collection.folder.store as store
from dupq.collection.collection import Collection, IndexStats
from dupq.collection.folder.cache import INDEX_FILE, REBUILD_SHARE, FaissCache
from dupq.collection.folder.store import WRITER_LOCK
from dupq.collection.rows import StoreFailure
from dupq.core.files import file_lock
from dupq.index.vectors import IndexConfig, VectorIndex, checksum_of, scans_exactly
from support.private import folder_cache, folder_store


def texts(n: int, offset: int = 0) -> list[str]:
    return [f"How do I learn topic number {i} well?" for i in range(offset, offset + n)]


@pytest.mark.parametrize("kind", ["flat", "hnsw"])
def test_the_vectors_of_ids_are_the_added_ones(kind):
    vectors = np.random.default_rng(0).standard_normal((300, 16)).astype(np.float32)
    index = VectorIndex(16, IndexConfig(kind))
    index.add(vectors)
    ids = np.array([299, 0, 17, 17, 150])
    np.testing.assert_array_equal(index.vectors(ids), vectors[ids])
    np.testing.assert_array_equal(index.vector(42), vectors[42])
    assert index.vectors(np.array([], dtype=np.int64)).shape == (0, 16)


def test_concurrent_cache_writes_leave_a_file_the_manifest_describes(tmp_path, tiny_model, monkeypatch):
    """Two holders of one collection (two workers) write ``index.faiss`` at once: the one whose index is
    smaller writes its file, the other writes file and manifest before the first writes its manifest.
    Under the lock the second waits, so the manifest describes the file beside it."""
    folder = tmp_path / "c"
    Collection.build(folder, texts(100), tiny_model, index="hnsw").close()
    a, b = Collection.open(folder, tiny_model), Collection.open(folder, tiny_model)
    a.add(texts(5, offset=100))
    b.add(texts(5, offset=105))  # b catches up with a's adds: b's index holds 110, a's 105
    a_wrote, b_done = threading.Event(), threading.Event()
    save = VectorIndex.save

    def interleaved(index, path):
        checksum = save(index, path)
        if index is folder_cache(a).index:
            a_wrote.set()
            b_done.wait(timeout=2)  # b writes now, unless it must wait for a
        return checksum

    monkeypatch.setattr(VectorIndex, "save", interleaved)

    def save_b():
        a_wrote.wait(timeout=10)
        folder_cache(b).save()
        b_done.set()

    other = threading.Thread(target=save_b)
    other.start()
    folder_cache(a).save()
    other.join()
    manifest = json.loads((folder / "manifest.json").read_text())
    on_disk = np.fromfile(folder / INDEX_FILE, dtype=np.uint8)
    assert manifest["checksum"] == checksum_of(on_disk)
    assert manifest["count"] == 110
    a.close()
    b.close()
    with Collection.open(folder, tiny_model) as again:  # the cache is used, not rebuilt
        assert FaissCache._cached(folder, folder_store(again), again.manifest, len(again))[1] == 110


def test_a_cache_no_newer_than_the_file_is_not_written(tmp_path, tiny_model, monkeypatch):
    folder = tmp_path / "c"
    Collection.build(folder, texts(100), tiny_model, index="flat").close()
    with Collection.open(folder, tiny_model) as coll:
        writes = []
        save = VectorIndex.save
        monkeypatch.setattr(VectorIndex, "save", lambda index, path: writes.append(path) or save(index, path))
        folder_cache(coll).save()  # the file holds every vector already
        assert writes == []
        coll.add(texts(3, offset=100))
        folder_cache(coll).save()
        assert len(writes) == 1


def test_a_collection_keeps_the_hnsw_settings_it_was_built_with(tmp_path, tiny_model):
    """A collection built with other HNSW settings (the defaults before) searches and rebuilds with its own."""
    old, new = IndexConfig("hnsw", hnsw_m=64, ef_construction=64, ef_search=256), IndexConfig()
    assert (new.hnsw_m, new.ef_construction, new.ef_search) == (16, 200, 40)  # the defaults now differ
    folder = tmp_path / "c"
    Collection.build(folder, texts(300), tiny_model, index=old).close()
    for rebuilt in (False, True):
        if rebuilt:
            (folder / INDEX_FILE).unlink()  # rebuilt from the stored vectors on open
        with Collection.open(folder, tiny_model) as coll:
            graph = faiss.downcast_index(folder_cache(coll).index.faiss).hnsw
            assert coll.manifest["index"] == {**coll.manifest["index"], "hnsw_m": 64, "ef_construction": 64}
            assert (graph.efSearch, graph.nb_neighbors(1), graph.efConstruction) == (256, 64, 64)


def test_an_add_waits_for_the_writer_lock(tmp_path, tiny_model):
    """Another process's writer holds the lock (here: another file description of it): the add waits, then stores."""
    folder = tmp_path / "c"
    Collection.build(folder, texts(50), tiny_model).close()
    with Collection.open(folder, tiny_model) as coll:
        holding, release = threading.Event(), threading.Event()

        def writer_elsewhere():
            with file_lock(folder / WRITER_LOCK):
                holding.set()
                release.wait(timeout=10)

        other = threading.Thread(target=writer_elsewhere)
        other.start()
        holding.wait(timeout=10)
        added = []
        adder = threading.Thread(target=lambda: added.extend(coll.add(texts(1, offset=50))))
        adder.start()
        time.sleep(0.5)
        assert added == [] and len(coll) == 50  # waiting, nothing committed
        release.set()
        adder.join(timeout=10)
        other.join()
        assert added == [50] and len(coll) == 51


def test_an_add_that_waits_too_long_for_the_writer_lock_fails_as_busy_and_stores_nothing(
    tmp_path, tiny_model, monkeypatch
):
    """The lock's wait ends as SQLite's did: after BUSY_TIMEOUT, a "busy" failure (the service's 503), nothing stored."""
    monkeypatch.setattr(store, "BUSY_TIMEOUT", 0.3)
    folder = tmp_path / "c"
    Collection.build(folder, texts(20), tiny_model).close()
    with Collection.open(folder, tiny_model) as coll, file_lock(folder / WRITER_LOCK):
        with pytest.raises(StoreFailure) as failed:
            coll.add(texts(1, offset=20))
        assert failed.value.reason == "busy" and "nothing was stored" in str(failed.value)
        assert len(coll) == 20


def wait_for(condition, seconds: float = 60.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "not within the time allowed"
        time.sleep(0.05)


def test_an_hnsw_graph_is_built_again_without_its_removed_questions(tmp_path, tiny_model):
    """Past REBUILD_SHARE removed, a thread builds a graph of the others and publishes it in index.faiss; another
    handle (another worker) loads it at its next search; later adds and removals follow; a new open reads it."""
    keys, folder = [f"k{i}" for i in range(300)], tmp_path / "c"
    queries = texts(4, offset=100) + ["How do I learn topic number 7 well?"]
    with Collection.build(folder, texts(300), tiny_model, keys=keys, index="hnsw") as coll:
        with Collection.open(folder, tiny_model) as other:
            coll.remove(keys[:40])  # 13 %: marked and filtered, the graph kept
            assert coll.index_stats().vectors == 300 and coll.index_stats().removed == 40 and REBUILD_SHARE > 40 / 300
            coll.remove(keys[40:90])  # 30 %
            wait_for(lambda: json.loads((folder / "manifest.json").read_text()).get("rebuilt") == 1)  # published
            assert coll.index_stats().vectors == 210  # swapped in before it was published
            manifest = json.loads((folder / "manifest.json").read_text())
            config = IndexConfig(**coll.manifest["index"])
            saved = VectorIndex.load(folder / INDEX_FILE, coll.manifest["dim"], config, checksum=manifest["checksum"])
            assert saved.stored == 210 and saved.ids().tolist() == list(range(90, 300))
            for handle in (coll, other):
                check_search(handle, queries, removed=set(keys[:90]))
                stats = handle.index_stats()
                assert (stats.vectors, stats.generation) == (210, 1)  # the other handle loaded it
            coll.add(["Which river flows through the most countries?"], keys=["new"])
            coll.remove(["k95"])
            for handle in (other, coll):
                assert handle.search(["Which river flows through the most countries?"], k=1)[0][0].key == "new"
                check_search(handle, queries + ["How do I learn topic number 95 well?"], removed={*keys[:90], "k95"})
    with Collection.open(folder, tiny_model) as again:
        assert folder_cache(again).index.mapped and again.index_stats().vectors == 211
        assert again.index_stats() == IndexStats("hnsw", 211, 1, 1, True)  # k95 removed since the rebuild
        check_search(again, queries, removed={*keys[:90], "k95"})


def test_a_rebuild_cut_short_before_its_manifest_leaves_a_collection_that_searches_right(
    tmp_path, tiny_model, monkeypatch
):
    """The graph's file is renamed into place, then the manifest: a crash between them (here, a failing manifest
    write) leaves a file the manifest does not describe, which the next open rebuilds from the stored vectors."""
    keys, folder = [f"k{i}" for i in range(200)], tmp_path / "c"
    coll = Collection.build(folder, texts(200), tiny_model, keys=keys, index="hnsw")
    real = cache_module.write_json

    def crash(path, obj):
        if obj.get("rebuilt"):
            raise OSError(28, "No space left on device")
        real(path, obj)

    monkeypatch.setattr(cache_module, "write_json", crash)
    coll.remove(keys[:100])
    wait_for(lambda: coll.cache_error is not None)  # publishing it failed
    assert coll.index_stats().vectors == 100  # swapped in before
    check_search(coll, texts(3, offset=150), removed=set(keys[:100]))
    coll.close()
    monkeypatch.setattr(cache_module, "write_json", real)
    with Collection.open(folder, tiny_model) as again:
        assert len(again) == 100
        check_search(again, texts(3, offset=150), removed=set(keys[:100]))


def test_removing_the_newest_questions_rebuilds_the_graph_once(tmp_path, tiny_model, caplog):
    """Undoing the newest quarter (an import, a spam wave) rebuilds the graph once: the rebuilt graph covers the
    removed tail (it is not added back by the next catch-up), so later single removals, an update and an add
    rebuild nothing, in this handle, another one or a new open; hits match brute force over the stored vectors."""
    keys, folder = [f"k{i}" for i in range(200)], tmp_path / "c"
    queries = texts(4, offset=40) + ["How do I learn topic number 170 well?"]
    rebuilds = lambda: sum("built again" in r.getMessage() for r in caplog.records)  # noqa: E731
    caplog.set_level("INFO", logger="dupq.collection.folder.backend")
    with Collection.build(folder, texts(200), tiny_model, keys=keys, index="hnsw") as coll:
        with Collection.open(folder, tiny_model) as other:
            coll.remove(keys[150:])  # the newest 25 %
            wait_for(lambda: rebuilds() == 1 and not coll.index_stats().rebuilding)
            removed = set(keys[150:])
            for key in keys[:20]:  # single removals: 20 of the 150 left is under REBUILD_SHARE
                coll.remove([key])
                removed.add(key)
                wait_for(lambda: not coll.index_stats().rebuilding)
            coll.update("k30", "Which river flows through the most countries?")
            coll.add(["What is the tallest mountain on Mars?"], keys=["new"])
            wait_for(lambda: not coll.index_stats().rebuilding)
            assert rebuilds() == 1 and coll.index_stats().generation == 1
            assert coll.index_stats().vectors == 152  # the 150 kept, the update's new text and the add
            for handle in (coll, other):
                check_search(handle, queries, removed=removed)
                assert handle.search(["What is the tallest mountain on Mars?"], k=1)[0][0].key == "new"
            assert other.index_stats().generation == 1 and not other.index_stats().rebuilding
    with Collection.open(folder, tiny_model) as again:
        assert again.index_stats().vectors == 152 and len(folder_cache(again).index) == 202  # ids up to 201
        check_search(again, queries, removed=removed)
    assert rebuilds() == 1


def test_the_exact_path_is_taken_only_where_it_costs_less():
    """A search kept to some ids scans them exactly only while that is cheaper than the index's own search with a
    selector: a graph's widened walk, an ivfpq index's short list read from the store, a flat index's scan."""
    hnsw, ivfpq, flat = IndexConfig(kind="hnsw"), IndexConfig(kind="ivfpq"), IndexConfig(kind="flat")
    assert not scans_exactly(hnsw, 18_999, 18_999 / 19_000, 10)  # one removal: the graph, as before it
    assert scans_exactly(hnsw, 500, 500 / 537_000, 10)  # a narrow filter: the allowed few, exactly
    assert not scans_exactly(ivfpq, 14_000, 1 / 3, 10) and not scans_exactly(ivfpq, 28_000, 2 / 3, 10)
    assert scans_exactly(ivfpq, 42, 0.001, 10)
    assert not scans_exactly(flat, 18_999, 18_999 / 19_000, 10) and scans_exactly(flat, 10, 0.001, 10)


@pytest.mark.parametrize("kind", ["flat", "hnsw"])
def test_stored_vectors_read_in_bulk_are_the_stored_ones(tmp_path, tiny_model, kind):
    """The store reads many ids a row at a time (dense runs in one read, scattered ids one by one), and a collection
    reads its hits' vectors from its index: any order, repeats, across rows; the answer is every vector as stored."""
    with Collection.build(tmp_path / "c", texts(300), tiny_model, index=kind) as coll:
        every, store = coll.stored_vectors(), folder_store(coll)
        rng = np.random.default_rng(0)
        for ids in (
            rng.permutation(300),  # dense: whole rows
            np.array([299, 0, 64, 64, 63, 200, 1]),  # scattered, repeated
            rng.choice(300, 40, replace=True),
            np.array([], dtype=np.int64),
        ):
            np.testing.assert_array_equal(store.vectors_by_id(ids), every[ids])
            np.testing.assert_array_equal(coll.stored_vectors(ids), every[ids])
