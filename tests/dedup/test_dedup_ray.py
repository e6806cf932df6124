"""`dupq dedup --ray`: a local Ray cluster on 127.0.0.1 gives the groups one machine gives.

The cluster is :func:`support.ray_cluster.local_cluster`'s (the lab's `dupq-lab dedup-scale ray` starts one alike).
"""

from __future__ import annotations

import pytest
from dedupkit import pool_texts, run_cli

from support.errors import refused
from support.ray_cluster import local_cluster, same_group_pairs
from support.serving import free_port

pytest.importorskip("ray")
pytestmark = [pytest.mark.ray, pytest.mark.slow]


@pytest.fixture(scope="module")
def ray_address():
    with local_cluster() as address:
        yield address


@pytest.mark.parametrize("exact_below", ["50000", "300"])  # exact search, and k-means partitions
def test_ray_gives_the_groups_of_one_machine(ray_address, tmp_path, tiny_model_dir, small_splits, exact_below):
    texts = pool_texts(small_splits, 1500)
    (tmp_path / "q.txt").write_text("\n".join(texts) + "\n")
    args = [tmp_path / "q.txt", "--model", tiny_model_dir, "--threshold", "0.9", "--exact-below", exact_below]
    one = run_cli(*args, "--out", tmp_path / "one.csv")
    assert one.exit_code == 0, one.output
    many = run_cli(*args, "--out", tmp_path / "ray.csv", "--ray", ray_address)
    assert many.exit_code == 0, many.output
    a, b = same_group_pairs(tmp_path / "one.csv"), same_group_pairs(tmp_path / "ray.csv")
    assert a and a == b


def test_an_unreachable_cluster_is_one_sentence(tmp_path, tiny_model_dir):
    (tmp_path / "q.txt").write_text("How?\nWhy?\n")
    port = free_port()
    r = run_cli(tmp_path / "q.txt", "--out", tmp_path / "d.csv", "--ray", f"127.0.0.1:{port}")
    assert refused(r).startswith(f"error: cannot reach a Ray cluster at 127.0.0.1:{port}")
    assert not (tmp_path / "d.csv").exists()
