"""Fault cases of the command line: files and arguments a user gives, and the model folders dupq reads.

Each case runs ``dupq`` in a subprocess (:func:`faultkit.dupq`) and checks the promise of every
command: a mistake is one ``error:`` sentence and exit status 2, never a traceback, and nothing
is stored or written on the way.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

from faultkit import Result, build, dupq, refused, stored


def cli_add_is_idempotent(tmp: Path) -> Result:
    """`index add --key` run twice stores one question."""
    folder = build(tmp / "c")
    runs = [dupq("index", "add", str(folder), "What is the deepest lake on earth?", "--key", "q-1") for _ in range(2)]
    texts = [t for _, _, t in stored(folder)]
    ok = all(r.returncode == 0 for r in runs) and texts.count("What is the deepest lake on earth?") == 1
    return Result(ok, tracebacks=sum(b"Traceback" in r.stderr for r in runs))


def every_line_accounted_for(tmp: Path) -> Result:
    """Unclosed quotes and wrong field counts, each line with its reason (train/evaluate read this way)."""
    from dupq.data.pairs import read_pairs

    lines = ["id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate"]
    for i in range(30):
        q1 = ('"' if i in (4, 17) else "") + f"How do I do thing {i}?"
        row = [str(i), str(2 * i), str(2 * i + 1), q1, f"What is thing {i}?", str(i % 2)]
        lines.append("\t".join(row[:4] if i == 9 else row))
    (tmp / "p.tsv").write_text("\n".join(lines) + "\n")
    pairs, dropped = read_pairs(tmp / "p.tsv")
    want = {"unclosed quote": 2, "wrong number of fields": 1}
    ok = dropped.reasons == want and len(pairs) + dropped.lines == 30
    build_run = dupq("index", "build", str(tmp / "p.tsv"), "--out", str(tmp / "c"))
    return Result(
        ok and build_run.returncode == 0 and b"2 unclosed quote" in build_run.stderr,
        data_lost=30 - len(pairs) - dropped.lines,
        tracebacks=int(b"Traceback" in build_run.stderr),
        detail=str(dropped),
    )


def questions_without_words(tmp: Path) -> Result:
    """ "???" is refused by every entry point, never stored or called a duplicate."""
    from fastapi.testclient import TestClient

    from dupq.core.files import DupqError
    from dupq.modeling.model import Model
    from dupq.service.app import create_app

    folder = build(tmp / "c")
    runs = [dupq("index", "add", str(folder), "???"), dupq("search", str(folder), "?!?")]
    results = [refused(r) for r in runs]
    try:
        Model.load().similarity("", "")
        library = False
    except DupqError:
        library = True
    (tmp / "q.txt").write_text("???\n!!!\n...\nHow do I learn Python?\n")
    dedup = dupq("dedup", str(tmp / "q.txt"), "--out", str(tmp / "d.json"))
    with TestClient(create_app(folder, token="t"), raise_server_exceptions=False) as c:
        codes = [
            c.post("/similarity", json={"q1": "\u001c", "q2": "\u001d"}).status_code,
            c.post("/search", json={"question": "?!?"}).status_code,
            c.post("/questions", json={"text": "..."}, headers={"Authorization": "Bearer t"}).status_code,
        ]
    ok = all(r for r, _ in results) and library and json.loads((tmp / "d.json").read_text()) == []
    ok = ok and codes == [422, 422, 422] and len(stored(folder)) == 40
    return Result(
        ok,
        tracebacks=sum(t for _, t in results) + int(b"Traceback" in dedup.stderr),
        server_500s=sum(c >= 500 for c in codes),
    )


def not_utf8_on_the_command_line(tmp: Path) -> Result:
    """`index add C $'Caf\\xe9 question'`."""
    folder = build(tmp / "c")
    run = dupq("index", "add", str(folder), b"Caf\xe9 question")
    ok, tracebacks = refused(run)
    return Result(ok and len(stored(folder)) == 40, tracebacks=tracebacks)


def bad_model_and_metrics_files(tmp: Path) -> Result:
    """config.json with wrong types, metrics.json not an object, thresholds out of range."""
    from dupq.modeling.model import BUNDLED

    runs = []
    for name, change in [
        ("dim", lambda c: c["encoder"].update(dim="128")),
        ("dropout", lambda c: c["encoder"].update(dropout=5)),
        ("encoder", lambda c: c.update(encoder=None)),
        ("threshold", lambda c: c.update(threshold=math.nan)),
        ("info", lambda c: c.update(threshold_info="dev")),
    ]:
        model = shutil.copytree(BUNDLED, tmp / name)
        config = json.loads((model / "config.json").read_text())
        change(config)
        (model / "config.json").write_text(json.dumps(config))
        runs.append(dupq("predict", "How?", "Why?", "--model", str(model)))
    model = shutil.copytree(BUNDLED, tmp / "metrics")
    (model / "metrics.json").write_text("[1, 2]")
    runs += [dupq("evaluate", str(model)), dupq("report", str(model), "--out", str(tmp / "r"))]
    (tmp / "q.txt").write_text("How do I learn Python?\nHow can I learn Python?\n")
    runs += [dupq("dedup", str(tmp / "q.txt"), "--out", str(tmp / "d.json"), "--threshold", t) for t in ("5", "nan")]
    checks = [refused(r) for r in runs]
    return Result(all(ok for ok, _ in checks), tracebacks=sum(t for _, t in checks))


def messages_name_the_real_problem(tmp: Path) -> Result:
    """A file where a folder is needed (and the reverse); a header-only file for index add."""
    folder = build(tmp / "c")
    (tmp / "h.tsv").write_text("question\tanswer\n")
    runs = {
        "a file, not a folder": dupq("search", str(tmp / "h.tsv"), "How?"),
        "a folder, not a file": dupq("index", "add", str(folder), "--file", str(tmp)),
        "holds no questions": dupq("index", "add", str(folder), "--file", str(tmp / "h.tsv")),
        "model folder": dupq("predict", "How?", "Why?", "--model", str(tmp / "h.tsv")),
    }
    checks = [(refused(r), want.encode() in r.stderr) for want, r in runs.items()]
    return Result(all(ok and said for (ok, _), said in checks), tracebacks=sum(t for (_, t), _ in checks))


def _model_folders(tmp: Path, changes: dict) -> dict[str, Path]:
    """A copy of the bundled model per change, ``(file, edit)`` applied to that file's JSON."""
    from dupq.modeling.model import BUNDLED

    folders = {}
    for name, (file, edit) in changes.items():
        folder = shutil.copytree(BUNDLED, tmp / name.replace(" ", "-"))
        obj = json.loads((folder / file).read_text())
        edit(obj)
        (folder / file).write_text(json.dumps(obj))
        folders[name] = folder
    return folders


def _predicts_refused(folders: dict[str, Path]) -> Result:
    """Every folder refused by ``predict`` as one sentence; the detail names those that were not."""
    runs = {
        name: dupq("predict", "How do I learn Python?", "How can I learn Python?", "--model", str(folder))
        for name, folder in folders.items()
    }
    checks = {name: refused(run) for name, run in runs.items()}
    failed = [name for name, (ok, _) in checks.items() if not ok]
    return Result(not failed, tracebacks=sum(t for _, t in checks.values()), detail="not refused: " + ", ".join(failed))


def model_vocab_and_head(tmp: Path) -> Result:
    """Vocab.json with a number among its tokens, max_tokens -1, no tokens; a head that is a list, a string, kind 5."""

    def token(v):
        v["tokens"][5] = 7

    return _predicts_refused(
        _model_folders(
            tmp,
            {
                "number token": ("vocab.json", token),
                "max_tokens -1": ("vocab.json", lambda v: v.update(max_tokens=-1)),
                "tokens a string": ("vocab.json", lambda v: v.update(tokens="abc")),
                "no tokens": ("vocab.json", lambda v: v.pop("tokens")),
                "head a list": ("config.json", lambda c: c.update(head=[])),
                "head a string": ("config.json", lambda c: c.update(head="mlp")),
                "head kind 5": ("config.json", lambda c: c["head"].update(kind=5)),
            },
        )
    )


def model_sizes(tmp: Path) -> Result:
    """Huge sizes in config.json (dim 65,536, a 10^9-wide head or vocabulary) and calibration a = 1e308."""
    return _predicts_refused(
        _model_folders(
            tmp,
            {
                "dim 65536": ("config.json", lambda c: c["encoder"].update(dim=65536)),
                "head hidden 1e9": ("config.json", lambda c: c["head"].update(hidden=10**9)),
                "vocab_size 1e9": ("config.json", lambda c: c["encoder"].update(vocab_size=10**9)),
                "calibration a 1e308": ("config.json", lambda c: c["calibration"].update(a=1e308)),
            },
        )
    )


def links_out_of_a_model_folder(tmp: Path) -> Result:
    """A sentence-transformers model folder whose subfolder links to a pickle outside it is refused before loading."""
    outside = tmp / "elsewhere"
    outside.mkdir()
    (outside / "pytorch_model.bin").write_bytes(b"not loaded: a pickle can run code")
    model = tmp / "m"
    files = model / "sentence-transformers"
    files.mkdir(parents=True)
    (files / "modules.json").write_text('[{"idx": 0, "name": "0", "path": "", "type": "x"}]')
    (files / "model.safetensors").write_bytes(b"{}")
    (files / "2_Dense").symlink_to(outside, target_is_directory=True)
    encoder = {"type": "sentence-transformers", "dim": 384, "folder": "sentence-transformers"}
    config = {"format": "dupq-model/1", "encoder": encoder, "threshold": 0.5}
    (model / "config.json").write_text(json.dumps(config))
    ok, tracebacks = refused(dupq("predict", "How?", "Why?", "--model", str(model)), saying="outside")
    return Result(ok, tracebacks=tracebacks)


def sizes_on_the_command_line(tmp: Path) -> Result:
    """A seed, width, batch or thread count the machine cannot hold is one sentence, before any data is read."""
    from fault_cases_training import pairs_file

    train = ["train", "--data", str(pairs_file(tmp)), "--out", str(tmp / "x"), "--epochs", "1"]
    runs = [
        dupq(*train, *extra)
        for extra in (["--seed", "-1"], ["--seed", "1" * 24], ["--dim", "1000000"], ["--threads", "100000"])
    ]
    runs += [dupq(*train, "--batch-size", str(10**9))]
    checks = [refused(run) for run in runs]
    return Result(all(ok for ok, _ in checks), tracebacks=sum(t for _, t in checks))


CASES = [
    cli_add_is_idempotent,
    every_line_accounted_for,
    questions_without_words,
    not_utf8_on_the_command_line,
    bad_model_and_metrics_files,
    messages_name_the_real_problem,
    model_vocab_and_head,
    model_sizes,
    links_out_of_a_model_folder,
    sizes_on_the_command_line,
]
