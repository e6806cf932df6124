"""Faults of `dupq dedup`: a work folder that is not dupq's, an output over an input, keys that do not come back,
a living collection, leftovers of a refused or killed run.
"""

from __future__ import annotations

import csv
import os
import signal
import subprocess
import time
from pathlib import Path

import faultkit
import pytest
from faultkit import build, clean, dupq, folder_of, synthetic

from support.errors import refused

pytestmark = pytest.mark.faults


def _questions(tmp: Path, n: int = 12) -> Path:
    (tmp / "q.txt").write_text("\n".join(synthetic(n) + synthetic(2)) + "\n")  # two repeated: a group
    return tmp / "q.txt"


def test_a_work_folder_dupq_did_not_make(tmp_path: Path):
    """`--work DIR` holding a `state.json` of its own and a user's file: refused, nothing deleted; a `state.json`
    that is a JSON list is one sentence too; a folder dupq made is reused and removed."""
    q = _questions(tmp_path)
    mine = folder_of(tmp_path / "mine", {"state.json": "{}", "thesis.txt": "notes"})
    refused(dupq("dedup", str(q), "--out", str(tmp_path / "p.csv"), "--work", str(mine)), str(mine))
    assert (mine / "thesis.txt").is_file() and not (tmp_path / "p.csv").exists(), "the folder was emptied"
    listed = folder_of(tmp_path / "listed", {"state.json": "[1, 2]"})
    refused(dupq("dedup", str(q), "--out", str(tmp_path / "p.csv"), "--work", str(listed)), str(listed))
    assert (listed / "state.json").read_text() == "[1, 2]"
    empty = folder_of(tmp_path / "empty")
    clean(dupq("dedup", str(q), "--out", str(tmp_path / "p.csv"), "--work", str(empty)))
    assert not empty.exists()


def test_an_output_over_an_input(tmp_path: Path):
    """`dedup arch.csv --out arch.csv`, under another spelling, through a link, or into `--work`: refused, the
    archive untouched; the same rule for `index decisions --out` into its collection and `compact --out MODEL`."""
    archive = tmp_path / "arch.csv"
    with open(archive, "w", newline="") as f:
        csv.writer(f).writerows([["id", "question", "tag"], *([f"k{i}", q, "x"] for i, q in enumerate(synthetic(8)))])
    before = archive.read_bytes()
    (tmp_path / "sub").mkdir()
    (tmp_path / "link.csv").symlink_to(archive)
    args = ["--key-column", "id", "--column", "question"]
    for out in (archive, tmp_path / "sub" / ".." / "arch.csv", tmp_path / "link.csv"):
        refused(dupq("dedup", str(archive), "--out", str(out), *args), "input")
    refused(dupq("dedup", str(archive), "--out", str(tmp_path / "w" / "p.csv"), "--work", str(tmp_path / "w"), *args))
    assert archive.read_bytes() == before
    folder = build(tmp_path / "c", n=6)
    refused(dupq("index", "decisions", str(folder), "--out", str(folder / "questions.sqlite")), "input")
    clean(dupq("search", str(folder), "How do I learn about Python in step 0?"))


def test_keys_round_trip(tmp_path: Path):
    """Keys such as `-5`, `+44`, `@user` come back as they were in `dedup --out x.csv` (texts stay inert)."""
    keys = ["-5", "+44", "@user", "=k", "plain"]
    with open(tmp_path / "q.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["id", "question"])
        for i, key in enumerate(keys):
            w.writerow([key, "=How do I learn Python?" if i < 2 else synthetic(1, i)[0]])
    clean(dupq("dedup", str(tmp_path / "q.csv"), "--out", str(tmp_path / "d.csv"), "--key-column", "id"))
    with open(tmp_path / "d.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert sorted(r["key"] for r in rows) == sorted(keys[:2])
    assert all(r["text"] == "'=How do I learn Python?" for r in rows)


def _groups(path: Path, column: str) -> set[frozenset[str]]:
    """The groups of a `dedup` output, each as the set of its members' ``column``."""
    with open(path, newline="") as f:
        groups: dict[str, set[str]] = {}
        for row in csv.DictReader(f):
            groups.setdefault(row["cluster"], set()).add(row[column])
    return {frozenset(g) for g in groups.values()}


def test_dedup_a_living_collection(tmp_path: Path):
    """`dupq dedup COLLECTION` after removes and a text update, and of a milvus-lite collection: groups by key."""
    folder = build(tmp_path / "c", n=20, keys=True)
    clean(dupq("index", "remove", str(folder), "k0", "k3"))
    clean(dupq("index", "update", str(folder), "k5", "--text", synthetic(1, 7)[0]))
    clean(dupq("dedup", str(folder), "--out", str(tmp_path / "d.csv")))
    groups = _groups(tmp_path / "d.csv", "key")
    assert frozenset({"k5", "k7"}) in groups and not {"k0", "k3"} & set().union(*groups)
    pytest.importorskip("pymilvus")
    lite = f"milvus:{tmp_path / 'm.db'}"
    clean(dupq("index", "build", str(_questions(tmp_path)), "--out", lite))
    clean(dupq("dedup", lite, "--out", str(tmp_path / "m.csv")))
    clean(dupq("dedup", str(tmp_path / "q.txt"), "--out", str(tmp_path / "f.csv")))
    assert _groups(tmp_path / "m.csv", "text") == _groups(tmp_path / "f.csv", "text")  # as the file's


def test_no_leftovers_of_a_refused_or_killed_run(tmp_path: Path):
    """An empty input leaves no `x.csv.work/`; the `.tmp` of a write killed mid-way is gone after the resumed run."""
    (tmp_path / "empty.txt").write_text("\n\n")
    refused(dupq("dedup", str(tmp_path / "empty.txt"), "--out", str(tmp_path / "x.csv")), "no questions")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty.txt"]
    q = tmp_path / "q.txt"
    q.write_text("\n".join(synthetic(3000)) + "\n")
    out = tmp_path / "d.csv"
    stall = tmp_path / "stall.py"  # the write stalls after its first rows: the run is killed there
    writing = str(tmp_path / "writing")
    stall.write_text(
        "import time, dupq.data.tables as t\n"
        "write = t.RowWriter.write\n"
        "def slow(self, rows):\n"
        f"    write(self, rows); self.f.flush(); open({writing!r}, 'w').close(); time.sleep(600)\n"
        "t.RowWriter.write = slow\n"
    )
    command = [*faultkit.DUPQ[:-1], f"import runpy; runpy.run_path({str(stall)!r}); " + faultkit.DUPQ[-1]]
    args = ["dedup", str(q), "--out", str(out), "--no-progress", "--threshold", "0.99", "--on", "similarity"]
    proc = subprocess.Popen([*command, *args], env=faultkit.ENV, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while not (tmp_path / "writing").exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert (tmp_path / "writing").exists(), "the write never began"
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")]  # what the kill left
    clean(dupq(*args))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d.csv", "empty.txt", "q.txt", "stall.py", "writing"]
    assert out.stat().st_size > 0


@pytest.mark.ray
@pytest.mark.slow
def test_a_ray_cluster_that_dies_mid_run(tmp_path: Path):
    """The cluster of `dedup --ray` killed while it encodes: one sentence within seconds (not Ray's fatal log after a
    minute), the work folder kept, and the run resumes on this machine."""
    pytest.importorskip("ray")
    from support.ray_cluster import kill, local_cluster

    q = tmp_path / "q.txt"
    q.write_text("\n".join(synthetic(40_000)) + "\n")
    work = tmp_path / "d.csv.work"
    args = ["dedup", str(q), "--out", str(tmp_path / "d.csv"), "--no-progress"]
    with local_cluster() as address:
        proc = subprocess.Popen(
            [*faultkit.DUPQ, *args, "--ray", address], env={**faultkit.ENV, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"},
            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 240
            while b'"read"' not in _state(work) and proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.2)
            assert proc.poll() is None, proc.communicate()[1].decode()[-600:]
            kill(address)
            killed = time.monotonic()
            _, err = proc.communicate(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    took = time.monotonic() - killed
    refused(subprocess.CompletedProcess(proc.args, proc.returncode, b"", err), "resume with the same command")
    assert took < 30 and (work / "state.json").is_file(), took
    clean(dupq(*args, timeout=600))
    assert not work.exists() and (tmp_path / "d.csv").stat().st_size > 0


def _state(work: Path) -> bytes:
    try:
        return (work / "state.json").read_bytes()
    except OSError:
        return b""
