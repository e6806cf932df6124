"""`dupq dedup --ray`: a local Ray cluster on 127.0.0.1 gives the groups one machine gives.

The cluster is started by ``ray start --head`` in a temporary folder of its own; every process
whose command line names that folder is stopped afterwards, so nothing of another cluster is touched.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dupq.cli import app

pytest.importorskip("ray")
pytestmark = [pytest.mark.ray, pytest.mark.slow]
ENV = {**os.environ, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}  # the cluster, as the driver (conftest.py), on 127.0.0.1


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _started_in(folder: str) -> list[int]:
    pids = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and folder.encode() in (proc / "cmdline").read_bytes():
                pids.append(int(proc.name))
        except OSError:
            continue
    return pids


@pytest.fixture(scope="module")
def ray_address():
    folder = tempfile.mkdtemp(prefix="rt", dir="/tmp")  # short: Ray's socket paths have a length limit
    port = _free_port()
    ray = Path(sys.executable).with_name("ray")
    subprocess.run(
        [ray, "start", "--head", f"--port={port}", "--node-ip-address=127.0.0.1", "--num-cpus=2",
         "--include-dashboard=false", "--disable-usage-stats", f"--temp-dir={folder}"],
        env=ENV, check=True, capture_output=True, timeout=180,
    )  # fmt: skip
    try:
        yield f"127.0.0.1:{port}"
    finally:
        import ray as ray_module

        ray_module.shutdown()
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for pid in _started_in(folder):
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
            time.sleep(2)
        shutil.rmtree(folder, ignore_errors=True)


def same_group_pairs(path: Path) -> set[tuple[str, str]]:
    import csv

    groups: dict[str, list[str]] = {}
    for row in csv.DictReader(path.open()):
        groups.setdefault(row["cluster"], []).append(row["key"])
    return {(a, b) for g in groups.values() for a in g for b in g if a < b}


@pytest.mark.parametrize("exact_below", ["50000", "300"])  # exact search, and k-means partitions
def test_ray_gives_the_groups_of_one_machine(ray_address, tmp_path, tiny_model_dir, small_splits, exact_below):
    texts = list(dict.fromkeys(q for q in small_splits.pool.q1[:1500] + small_splits.pool.q2[:1500] if q.strip()))
    (tmp_path / "q.txt").write_text("\n".join(texts) + "\n")
    args = ["dedup", str(tmp_path / "q.txt"), "--model", str(tiny_model_dir), "--threshold", "0.9"]
    args += ["--exact-below", exact_below, "--no-progress"]
    one = CliRunner().invoke(app, [*args, "--out", str(tmp_path / "one.csv")])
    assert one.exit_code == 0, one.output
    many = CliRunner().invoke(app, [*args, "--out", str(tmp_path / "ray.csv"), "--ray", ray_address])
    assert many.exit_code == 0, many.output
    a, b = same_group_pairs(tmp_path / "one.csv"), same_group_pairs(tmp_path / "ray.csv")
    assert a and a == b


def test_an_unreachable_cluster_is_one_sentence(tmp_path, tiny_model_dir):
    (tmp_path / "q.txt").write_text("How?\nWhy?\n")
    port = _free_port()
    r = CliRunner().invoke(
        app, ["dedup", str(tmp_path / "q.txt"), "--out", str(tmp_path / "d.csv"), "--ray", f"127.0.0.1:{port}"]
    )
    assert r.exit_code == 2 and r.output.startswith(f"error: cannot reach a Ray cluster at 127.0.0.1:{port}")
    assert not (tmp_path / "d.csv").exists()
