"""Fault cases for what users hand dupq and where they ask it to write: a byte-order mark, a header
naming a column twice, an endless line, a full disk during a build, a broken Milvus address, spreadsheet formulas, keys given twice, output paths that are folders or lie
in missing folders, and torchrun ranks given other options.

Collected by ``bench/faults.py`` (``CASES``); each case runs the CLI end to end in a subprocess. A command
that reads without bound runs with its memory capped (1 GiB of data), so on code without the line cap it
fails in seconds with a MemoryError instead of taking the machine's memory.
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

from fault_cases_training import TRAIN, pairs_file
from faultkit import DUPQ, ENV, Result, build, dupq, refused, stored, synthetic

BOM = b"\xef\xbb\xbf"
LINE_CAP = "longer than 1,048,576 bytes"
MILVUS = "milvus+http://[::1?collection=x"


def limited(*args: str, data: int = 1 << 30, file_size: int | None = None, stdin: bytes | None = None):
    """``dupq *args`` with its memory (and the size of any file it writes) capped."""

    def caps() -> None:
        resource.setrlimit(resource.RLIMIT_DATA, (data, data))
        if file_size is not None:  # Python ignores SIGXFSZ: a write past the cap fails as on a full disk
            resource.setrlimit(resource.RLIMIT_FSIZE, (file_size, file_size))

    return subprocess.run([*DUPQ, *args], input=stdin, capture_output=True, timeout=180, env=ENV, preexec_fn=caps)


def checks(runs: list[tuple[subprocess.CompletedProcess, bytes]]) -> Result:
    """Each run refused as dupq promises (exit 2, one ``error:`` sentence), the sentence holding the given words."""
    failed, tracebacks = [], 0
    for run, words in runs:
        ok, traceback = refused(run)
        tracebacks += traceback
        if not (ok and words in run.stderr):
            failed.append(run.stderr.decode(errors="replace")[-200:])
    return Result(not failed, tracebacks=tracebacks, detail=" | ".join(failed)[:400])


def byte_order_mark(tmp: Path) -> Result:
    """a file starting with a UTF-8 byte-order mark reads as the same file without one."""
    pairs = b"How do I learn Python?\tWhat is the best way to learn Python?\nHow old are you?\tWhat is your age?\n"
    questions = ("\n".join([*synthetic(3), synthetic(1)[0]]) + "\n").encode()
    outputs = {}
    for name, mark in (("plain", b""), ("marked", BOM)):
        (tmp / f"{name}.tsv").write_bytes(mark + pairs)
        (tmp / f"{name}.txt").write_bytes(mark + questions)
        build_run = dupq("index", "build", str(tmp / f"{name}.txt"), "--out", str(tmp / name))
        outputs[name] = [
            dupq("predict", "--pairs", str(tmp / f"{name}.tsv")).stdout,
            dupq("search", str(tmp / "plain"), "--queries", str(tmp / f"{name}.txt"), "--json", "-k", "1").stdout,
            dupq("dedup", str(tmp / f"{name}.txt"), "--out", str(tmp / f"{name}.json")).returncode,
            json.loads((tmp / f"{name}.json").read_text())["clusters"],
            [text for _, _, text in stored(tmp / name)] if build_run.returncode == 0 else build_run.stderr,
        ]
    same = [a == b for a, b in zip(outputs["plain"], outputs["marked"])]
    return Result(all(same) and bool(outputs["plain"][0]), detail=f"the same output: {same}")


def repeated_header_names(tmp: Path) -> Result:
    """`question,tag,tag` is refused (one tag would be dropped), by every command that reads a table."""
    (tmp / "t.csv").write_text("question,tag,tag\nHow do I cook rice?,a,b\nHow do I boil eggs?,c,d\n")
    folder = build(tmp / "c")
    said = b"names the column 'tag' twice (columns 2 and 3)"
    return checks(
        [
            (dupq("index", "build", str(tmp / "t.csv"), "--out", str(tmp / "new")), said),
            (dupq("index", "add", str(folder), "--file", str(tmp / "t.csv")), said),
            (dupq("dedup", str(tmp / "t.csv"), "--out", str(tmp / "d.json")), said),
        ]
    )


def endless_line(tmp: Path) -> Result:
    """/dev/zero (no line end, ever) for every reader: refused at 1 MiB, memory capped at 1 GiB."""
    folder = build(tmp / "c")
    zero = "/dev/zero"
    return checks(
        [
            (limited("predict", "--pairs", zero), b"line 1 of /dev/zero is " + LINE_CAP.encode()),
            (
                limited("predict", "--pairs", "-", stdin=b"How?\tWhy?\n" + b"\0" * (2 << 20)),
                b"line 2 of standard input",
            ),
            (limited("index", "build", zero, "--out", str(tmp / "new")), LINE_CAP.encode()),
            (limited("index", "add", str(folder), "--file", zero), LINE_CAP.encode()),
            (limited("dedup", zero, "--out", str(tmp / "d.json")), LINE_CAP.encode()),
            (limited("search", str(folder), "--queries", zero), LINE_CAP.encode()),
        ]
    )


def index_build_on_a_full_disk(tmp: Path) -> Result:
    """the database outgrows the space (a 256 KiB file size cap): one sentence, no folder left behind."""
    (tmp / "q.txt").write_text("\n".join(synthetic(3000)) + "\n")
    run = limited("index", "build", str(tmp / "q.txt"), "--out", str(tmp / "c"), file_size=256 << 10)
    (ok, tracebacks), left = refused(run), sorted(p.name for p in tmp.iterdir() if p.name != "q.txt")
    said = str(tmp / "c").encode() in run.stderr
    return Result(ok and said and not left, tracebacks=tracebacks, detail=f"left behind: {left}")


def unparsable_milvus_address(tmp: Path) -> Result:
    """`milvus+http://[::1?collection=x` (an unclosed IPv6 bracket) wherever a collection is named."""
    (tmp / "q.txt").write_text("How do I learn Python?\n")
    said = b"the Milvus location " + MILVUS.encode()
    return checks(
        [
            (dupq("search", MILVUS, "How do I learn Python?"), said),
            (dupq("index", "add", MILVUS, "How do I learn Python?"), said),
            (dupq("index", "build", str(tmp / "q.txt"), "--store", MILVUS), said),
        ]
    )


FORMULAS = ['=HYPERLINK("http://x.example","How do I learn Python?")', "+1+1 how do I add?", "-2+3 why?"]
FORMULAS += ["@SUM(A1) how do I sum?", "\tHow do I indent?", "\rWhy do I return?"]


def formulas_in_dedup_csv(tmp: Path) -> Result:
    """`dedup --out x.csv` never writes a cell a spreadsheet would run (=, +, -, @, tab, CR first)."""
    with open(tmp / "q.csv", "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["id", "question"])
        for i, text in enumerate(FORMULAS * 2):  # each twice: a cluster of duplicates, written out
            writer.writerow([f"=key{i}", text])
    run = dupq("dedup", str(tmp / "q.csv"), "--out", str(tmp / "d.csv"))
    if run.returncode != 0:
        return Result(False, tracebacks=int(b"Traceback" in run.stderr), detail=run.stderr.decode()[-200:])
    with open(tmp / "d.csv", newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    cells = [row["text"] for row in rows]
    live = [c for c in cells if c.startswith(("=", "+", "-", "@", "\t", "\r"))]
    kept = sorted(c.removeprefix("'") for c in cells) == sorted(FORMULAS * 2)
    return Result(not live and kept, detail=f"{len(live)} of {len(cells)} cells would run")


def duplicate_keys_in_one_file(tmp: Path) -> Result:
    """`1,cook rice` / `1,cook pasta` in one `index add --file`: refused naming both lines; no id taken."""
    folder = build(tmp / "c")
    (tmp / "k.csv").write_text("key,question\n1,How do I cook rice?\n1,How do I cook pasta?\n")
    add = dupq("index", "add", str(folder), "--file", str(tmp / "k.csv"), "--key-column", "key")
    (ok, tracebacks), said = refused(add), b"lines 2 and 3" in add.stderr
    after = dupq("index", "add", str(folder), "How do I bake bread?")
    ids = [i for i, _, _ in stored(folder)]
    return Result(
        ok and said and b"id 40" in after.stdout and ids == list(range(41)),
        tracebacks=tracebacks,
        detail=add.stderr.decode()[-200:],
    )


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


def errors_name_the_users_path(tmp: Path) -> Result:
    """`dedup --out x.json` where x.json is a folder, and `calibrate` of a read-only model folder:
    the sentence names the user's path, never a temporary file."""
    from dupq.modeling.model import BUNDLED

    (tmp / "q.txt").write_text("\n".join(synthetic(4)) + "\n")
    (tmp / "x.json").mkdir()
    runs = [(dupq("dedup", str(tmp / "q.txt"), "--out", str(tmp / "x.json")), str(tmp / "x.json").encode())]
    model = shutil.copytree(BUNDLED, tmp / "model")
    metrics = json.loads((model / "metrics.json").read_text())
    metrics.setdefault("training", {})["split"] = {"train_pool": 400, "test": 100, "dev": 100}  # pairs_file's rows
    (model / "metrics.json").write_text(json.dumps(metrics))
    data = pairs_file(tmp)
    with read_only(model) as done:
        if done:
            runs.append((dupq("calibrate", str(model), "--data", str(data)), str(model / "model.safetensors").encode()))
    result = checks(runs)
    temporary = [r.stderr.decode(errors="replace") for r, _ in runs if b".tmp" in r.stderr]
    detail = result.detail + ("" if done else " (the model folder could not be made read-only: not checked)")
    return Result(result.survived and not temporary, tracebacks=result.tracebacks, detail=detail)


def missing_output_folder(tmp: Path) -> Result:
    """`dedup --out /nonexistent/dir/x.json` is refused; no folder is created."""
    (tmp / "q.txt").write_text("\n".join(synthetic(4)) + "\n")
    runs = [
        (dupq("dedup", str(tmp / "q.txt"), "--out", str(tmp / "none" / "dir" / f"x.{kind}")), b"does not exist")
        for kind in ("json", "csv")
    ]
    result = checks(runs)
    return Result(result.survived and not (tmp / "none").exists(), tracebacks=result.tracebacks, detail=result.detail)


RANK_ONE = """import os, sys
from dupq.cli import main
common, _, rank1 = " ".join(sys.argv[1:]).partition(" -- ")
sys.argv = ["dupq", "train", *common.split(), *(rank1.split() if os.environ.get("RANK") == "1" else [])]
main()
"""


def ranks_given_other_options(tmp: Path) -> Result:
    """Items 6, 15: torchrun with rank 1 given another --seed (diverging replicas), --batch-size (a gloo error)
    or --epochs (a hang): every rank stops at the start with one sentence naming the option, within a minute."""
    data = pairs_file(tmp)
    (tmp / "ranks.py").write_text(RANK_ONE)
    failed, tracebacks = [], 0
    for option, value in (("--seed", "3"), ("--batch-size", "16"), ("--epochs", "3")):
        logs = tmp / f"logs{option}"
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
        command += ["--log-dir", str(logs), "--redirects", "3", str(tmp / "ranks.py")]
        command += [
            "--data",
            str(data),
            "--out",
            str(tmp / f"out{option}"),
            "--epochs",
            "2",
            *TRAIN,
            "--",
            option,
            value,
        ]
        started = time.monotonic()
        proc = subprocess.Popen(
            command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=ENV, start_new_session=True
        )
        try:
            code = proc.wait(90)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # the workers too
            code = proc.wait()
        seconds = time.monotonic() - started
        errors = [p.read_text(errors="replace") for p in sorted(logs.rglob("stderr.log"))]
        tracebacks += sum("Traceback" in e for e in errors)
        said = f"error: rank 1 has another {option} than rank 0"
        if code == 0 or seconds > 60 or len(errors) != 2 or not all(said in e for e in errors):
            failed.append(f"{option}: exit {code} after {seconds:.0f}s")
    return Result(not failed, tracebacks=tracebacks, detail="; ".join(failed))


CASES = [
    byte_order_mark,
    repeated_header_names,
    endless_line,
    index_build_on_a_full_disk,
    unparsable_milvus_address,
    formulas_in_dedup_csv,
    duplicate_keys_in_one_file,
    errors_name_the_users_path,
    missing_output_folder,
    ranks_given_other_options,
]
