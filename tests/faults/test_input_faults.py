"""Faults in what users hand dupq and where they ask it to write: a byte-order mark, a header naming a column
twice, an endless line, a full disk during a build, a broken Milvus address, spreadsheet formulas, keys given
twice, output paths that are folders or lie in missing folders, and torchrun ranks given other options.

Each test runs the CLI end to end in a subprocess (``tests/test_faults_input.py`` checks the same rules in
this process). A command that reads without bound runs with its memory capped (1 GiB of data), so on code
without the line cap it fails in seconds with a MemoryError instead of taking the machine's memory.
"""

from __future__ import annotations

import csv
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import faultkit
import pytest
from faultkit import TRAIN, build, clean, dupq, pairs_file, refused, stored, synthetic

pytestmark = pytest.mark.faults

BOM = b"\xef\xbb\xbf"
LINE_CAP = "longer than 1,048,576 bytes"
MILVUS = "milvus+http://[::1?collection=x"


def limited(*args: str, data: int = 1 << 30, file_size: int | None = None, stdin: bytes | None = None):
    """``dupq *args`` with its memory (and the size of any file it writes) capped."""

    def caps() -> None:
        resource.setrlimit(resource.RLIMIT_DATA, (data, data))
        if file_size is not None:  # Python ignores SIGXFSZ: a write past the cap fails as on a full disk
            resource.setrlimit(resource.RLIMIT_FSIZE, (file_size, file_size))

    command = [*faultkit.DUPQ, *args]
    return subprocess.run(command, input=stdin, capture_output=True, timeout=180, env=faultkit.ENV, preexec_fn=caps)


def test_byte_order_mark(tmp_path: Path):
    """a file starting with a UTF-8 byte-order mark reads as the same file without one."""
    pairs = b"How do I learn Python?\tWhat is the best way to learn Python?\nHow old are you?\tWhat is your age?\n"
    questions = ("\n".join([*synthetic(3), synthetic(1)[0]]) + "\n").encode()
    outputs = {}
    for name, mark in (("plain", b""), ("marked", BOM)):
        (tmp_path / f"{name}.tsv").write_bytes(mark + pairs)
        (tmp_path / f"{name}.txt").write_bytes(mark + questions)
        clean(dupq("index", "build", str(tmp_path / f"{name}.txt"), "--out", str(tmp_path / name)))
        outputs[name] = [
            dupq("predict", "--pairs", str(tmp_path / f"{name}.tsv")).stdout,
            dupq(
                "search", str(tmp_path / "plain"), "--queries", str(tmp_path / f"{name}.txt"), "--json", "-k", "1"
            ).stdout,
            dupq("dedup", str(tmp_path / f"{name}.txt"), "--out", str(tmp_path / f"{name}.json")).returncode,
            json.loads((tmp_path / f"{name}.json").read_text()),
            [text for _, _, text in stored(tmp_path / name)],
        ]
    assert outputs["plain"][0] and outputs["plain"] == outputs["marked"]


def test_repeated_header_names(tmp_path: Path):
    """`question,tag,tag` is refused (one tag would be dropped), by every command that reads a table."""
    (tmp_path / "t.csv").write_text("question,tag,tag\nHow do I cook rice?,a,b\nHow do I boil eggs?,c,d\n")
    folder = build(tmp_path / "c")
    said = "names the column 'tag' twice (columns 2 and 3)"
    refused(dupq("index", "build", str(tmp_path / "t.csv"), "--out", str(tmp_path / "new")), said)
    refused(dupq("index", "add", str(folder), "--file", str(tmp_path / "t.csv")), said)
    refused(dupq("dedup", str(tmp_path / "t.csv"), "--out", str(tmp_path / "d.json")), said)


def test_endless_line(tmp_path: Path):
    """/dev/zero (no line end, ever) for every reader: refused at 1 MiB, memory capped at 1 GiB."""
    folder = build(tmp_path / "c")
    zero = "/dev/zero"
    refused(limited("predict", "--pairs", zero), "line 1 of /dev/zero is " + LINE_CAP)
    refused(limited("predict", "--pairs", "-", stdin=b"How?\tWhy?\n" + b"\0" * (2 << 20)), "line 2 of standard input")
    refused(limited("index", "build", zero, "--out", str(tmp_path / "new")), LINE_CAP)
    refused(limited("index", "add", str(folder), "--file", zero), LINE_CAP)
    refused(limited("dedup", zero, "--out", str(tmp_path / "d.json")), LINE_CAP)
    refused(limited("search", str(folder), "--queries", zero), LINE_CAP)


def test_index_build_on_a_full_disk(tmp_path: Path):
    """the database outgrows the space (a 256 KiB file size cap): one sentence, no folder left behind."""
    (tmp_path / "q.txt").write_text("\n".join(synthetic(3000)) + "\n")
    refused(
        limited("index", "build", str(tmp_path / "q.txt"), "--out", str(tmp_path / "c"), file_size=256 << 10),
        str(tmp_path / "c"),
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["q.txt"]


def test_unparsable_milvus_address(tmp_path: Path):
    """`milvus+http://[::1?collection=x` (an unclosed IPv6 bracket) wherever a collection is named."""
    (tmp_path / "q.txt").write_text("How do I learn Python?\n")
    said = "the Milvus location " + MILVUS
    refused(dupq("search", MILVUS, "How do I learn Python?"), said)
    refused(dupq("index", "add", MILVUS, "How do I learn Python?"), said)
    refused(dupq("index", "build", str(tmp_path / "q.txt"), "--out", MILVUS), said)


FORMULAS = ['=HYPERLINK("http://x.example","How do I learn Python?")', "+1+1 how do I add?", "-2+3 why?"]
FORMULAS += ["@SUM(A1) how do I sum?", "\tHow do I indent?", "\rWhy do I return?"]


def test_formulas_in_dedup_csv(tmp_path: Path):
    """`dedup --out x.csv` never writes a cell a spreadsheet would run (=, +, -, @, tab, CR first)."""
    with open(tmp_path / "q.csv", "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["id", "question"])
        for i, text in enumerate(FORMULAS * 2):  # each twice: a cluster of duplicates, written out
            writer.writerow([f"=key{i}", text])
    clean(dupq("dedup", str(tmp_path / "q.csv"), "--out", str(tmp_path / "d.csv")))
    with open(tmp_path / "d.csv", newline="", encoding="utf-8") as f:
        cells = [row["text"] for row in csv.DictReader(f)]
    assert [c for c in cells if c.startswith(("=", "+", "-", "@", "\t", "\r"))] == []
    assert sorted(c.removeprefix("'") for c in cells) == sorted(FORMULAS * 2)


def test_duplicate_keys_in_one_file(tmp_path: Path):
    """`1,cook rice` / `1,cook pasta` in one `index add --file`: refused naming both lines; no id taken."""
    folder = build(tmp_path / "c")
    (tmp_path / "k.csv").write_text("key,question\n1,How do I cook rice?\n1,How do I cook pasta?\n")
    refused(
        dupq("index", "add", str(folder), "--file", str(tmp_path / "k.csv"), "--key-column", "key"), "lines 2 and 3"
    )
    after = dupq("index", "add", str(folder), "How do I bake bread?")
    assert b"id 40" in after.stdout and [i for i, _, _ in stored(folder)] == list(range(41))


@contextmanager
def read_only(folder: Path) -> Iterator[bool]:
    """``folder`` made read-only for the block (whether that worked): ``chmod``, or as root, whom modes do not
    stop, the immutable attribute (``chattr +i``, on file systems that have it)."""
    if os.geteuid() != 0:
        folder.chmod(0o555)
        try:
            yield True
        finally:
            folder.chmod(0o755)
        return
    done = shutil.which("chattr") is not None and subprocess.run(["chattr", "+i", str(folder)]).returncode == 0
    try:
        yield done
    finally:
        if done:
            subprocess.run(["chattr", "-i", str(folder)])


def test_errors_name_the_users_path(tmp_path: Path):
    """`dedup --out x.json` where x.json is a folder, and `calibrate` of a read-only model folder (where the file
    system lets it be made one): the sentence names the user's path, never a temporary file."""
    from dupq.modeling.model import BUNDLED

    (tmp_path / "q.txt").write_text("\n".join(synthetic(4)) + "\n")
    (tmp_path / "x.json").mkdir()
    runs = [(dupq("dedup", str(tmp_path / "q.txt"), "--out", str(tmp_path / "x.json")), str(tmp_path / "x.json"))]
    model = shutil.copytree(BUNDLED, tmp_path / "model")
    metrics = json.loads((model / "metrics.json").read_text())
    metrics.setdefault("training", {})["split"] = {"train_pool": 400, "test": 100, "dev": 100}  # pairs_file's rows
    (model / "metrics.json").write_text(json.dumps(metrics))
    data = pairs_file(tmp_path)
    with read_only(model) as done:
        if done:
            runs.append((dupq("calibrate", str(model), "--data", str(data)), str(model / "model.safetensors")))
    for run, path in runs:
        refused(run, path)
        assert b".tmp" not in run.stderr


def test_missing_output_folder(tmp_path: Path):
    """`dedup --out /nonexistent/dir/x.json` is refused; no folder is created."""
    (tmp_path / "q.txt").write_text("\n".join(synthetic(4)) + "\n")
    for kind in ("json", "csv"):
        refused(
            dupq("dedup", str(tmp_path / "q.txt"), "--out", str(tmp_path / "none" / "dir" / f"x.{kind}")),
            "does not exist",
        )
    assert not (tmp_path / "none").exists()


RANK_ONE = """import os, sys
from dupq.cli import main
common, _, rank1 = " ".join(sys.argv[1:]).partition(" -- ")
sys.argv = ["dupq", "train", *common.split(), *(rank1.split() if os.environ.get("RANK") == "1" else [])]
main()
"""


@pytest.mark.parametrize("option, value", [("--seed", "3"), ("--batch-size", "16"), ("--epochs", "3")])
def test_ranks_given_other_options(tmp_path: Path, option, value):
    """torchrun with rank 1 given another --seed (diverging replicas), --batch-size (a gloo error) or --epochs
    (a hang): every rank stops at the start with one sentence naming the option, within a minute."""
    (tmp_path / "ranks.py").write_text(RANK_ONE)
    logs = tmp_path / "logs"
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
    command += ["--log-dir", str(logs), "--redirects", "3", str(tmp_path / "ranks.py")]
    command += ["--data", str(pairs_file(tmp_path)), "--out", str(tmp_path / "out"), "--epochs", "2", *TRAIN]
    command += ["--", option, value]
    started = time.monotonic()
    proc = subprocess.Popen(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=faultkit.ENV, start_new_session=True
    )
    try:
        code = proc.wait(90)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the workers too
        code = proc.wait()
    seconds = time.monotonic() - started
    errors = [p.read_text(errors="replace") for p in sorted(logs.rglob("stderr.log"))]
    assert code != 0 and seconds < 60, f"exit {code} after {seconds:.0f}s"
    assert len(errors) == 2 and all(f"error: rank 1 has another {option} than rank 0" in e for e in errors), errors
    assert not any("Traceback" in e for e in errors)
