"""Fault cases of the files and folders dupq reads and writes: nesting that breaks a parser, folders that
a command would overwrite, teacher vectors a run would throw away, adds a re-encoding would miss.

The rules these cases hold are each in one place: :func:`dupq.core.files.read_json` (every JSON
file), :func:`dupq.core.files.check_new_folder` (every command that writes a folder), the teacher
cache's ``extend`` (:func:`dupq.training.distil.teacher.teach`) and :mod:`dupq.search.reencode`.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np

import faultkit
from faultkit import Result, build, dupq, free_port, refused, synthetic

NESTED = "[" * 1000 + "]" * 1000  # Python's parser recurses once a level: RecursionError, where it is not checked


def _model_copy(tmp: Path) -> Path:
    from dupq.modeling.model import BUNDLED

    return Path(shutil.copytree(BUNDLED, tmp / "m"))


def nested_json_in_model_files(tmp: Path) -> Result:
    """1,000 nested brackets in a model's metrics.json, config.json or vocab.json: one sentence from info, predict, export."""
    results = []
    for name in ("metrics.json", "config.json", "vocab.json"):
        model = _model_copy(tmp / name)
        (model / name).write_text(NESTED)
        for args in (("info", str(model)), ("predict", "How?", "Why?", "--model", str(model))):
            results.append(refused(dupq(*args), "nests more than"))
        results.append(refused(dupq("export", str(model), str(tmp / name / "out")), "nests more than"))
    return Result(all(ok for ok, _ in results), tracebacks=sum(t for _, t in results), detail=str(results))


def nested_json_in_collection_and_teacher_files(tmp: Path) -> Result:
    """1,000 nested brackets in a collection's manifest.json (search, serve) or a teacher cache's teacher.json."""
    from dupq.core.files import DupqError
    from dupq.training.distil.teacher import TeacherCache

    folder = build(tmp / "c", n=10)
    (folder / "manifest.json").write_text(NESTED)
    results = [
        refused(dupq("search", str(folder), "How do I learn Python?"), "nests more than"),
        refused(dupq("serve", str(folder), "--port", str(free_port())), "nests more than"),
    ]
    (tmp / "t").mkdir()
    (tmp / "t" / "teacher.json").write_text(NESTED)
    try:
        TeacherCache.load(tmp / "t")
        teacher = False
    except DupqError as e:
        teacher = "nests more than" in str(e)
    return Result(all(ok for ok, _ in results) and teacher, tracebacks=sum(t for _, t in results), detail=str(results))


def export_over_an_existing_folder(tmp: Path) -> Result:
    """`dupq export` refuses a folder that holds a model or anything else without --overwrite; with it, replaces a model."""
    model = _model_copy(tmp)
    first = dupq("export", str(model), str(tmp / "e"))
    before = (tmp / "e" / "model.safetensors").read_bytes()
    again = refused(dupq("export", str(model), str(tmp / "e"), "--half"), "--overwrite")
    kept = (tmp / "e" / "model.safetensors").read_bytes() == before
    (tmp / "full").mkdir()
    (tmp / "full" / "notes.txt").write_text("mine")
    other = refused(dupq("export", str(model), str(tmp / "full")), "--overwrite")
    replaced = dupq("export", str(model), str(tmp / "e"), "--half", "--overwrite")
    half = json.loads((tmp / "e" / "config.json").read_text())["weights_dtype"] == "float16"
    ok = first.returncode == 0 and again[0] and kept and other[0] and (tmp / "full" / "notes.txt").exists()
    ok = ok and replaced.returncode == 0 and half
    return Result(
        ok,
        data_lost=int(not kept) + int(not (tmp / "full" / "notes.txt").exists()),
        tracebacks=again[1] + other[1],
        detail=f"kept {kept}, other {other}, replaced {replaced.returncode} half {half}",
    )


def commands_that_write_a_folder(tmp: Path) -> Result:
    """train, report, distil tune, adapt, index build and index reencode refuse a folder that holds files (one rule)."""
    model = _model_copy(tmp)
    folder = build(tmp / "c", n=10)
    full = tmp / "full"
    full.mkdir()
    (full / "notes.txt").write_text("mine")
    (tmp / "q.txt").write_text("\n".join(synthetic(10)) + "\n")
    runs = {
        "train": dupq("train", "--out", str(full), "--epochs", "1"),
        "report": dupq("report", str(model), "--out", str(full)),
        "distil tune": dupq("distil", "tune", "--out", str(full)),
        "adapt": dupq("adapt", str(tmp / "q.txt"), "--out", str(full)),
        "index build": dupq("index", "build", str(tmp / "q.txt"), "--out", str(full)),
        "index reencode": dupq("index", "reencode", str(folder), "--model", str(model), "--out", str(full)),
    }
    results = {name: refused(run, "already exists") for name, run in runs.items()}
    intact = sorted(p.name for p in full.iterdir()) == ["notes.txt"]
    return Result(
        all(ok for ok, _ in results.values()) and intact,
        data_lost=int(not intact),
        tracebacks=sum(t for _, t in results.values()),
        detail=", ".join(name for name, (ok, _) in results.items() if not ok),
    )


def _fake_teacher(calls: list[str]):
    """A deterministic teacher of 16 dimensions that records the texts it encodes."""

    def encode(texts: list[str]) -> np.ndarray:
        calls.extend(texts)
        seeds = [int.from_bytes(hashlib.sha256(t.encode()).digest()[:4], "little") for t in texts]
        vectors = np.stack([np.random.default_rng(s).standard_normal(16) for s in seeds]).astype(np.float32)
        return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)

    return encode


def adapt_cache_keeps_teacher_vectors(tmp: Path) -> Result:
    """adapt with --cache of a teach run keeps every vector there and encodes only the questions it lacks."""
    from dupq.modeling.model import Model
    from dupq.training.adapt import AdaptConfig, adapt
    from dupq.training.distil.teacher import TeacherCache, teach

    calls: list[str] = []
    encode = _fake_teacher(calls)
    taught, mine = synthetic(60), synthetic(40, offset=40)  # 20 in common
    teach(taught, tmp / "cache", encode, "fake")
    before = TeacherCache.load(tmp / "cache")
    calls.clear()
    config = AdaptConfig(epochs=1, batch_size=16)
    adapt(
        Model.load(), mine, tmp / "adapted", encode, "fake", config, tmp / "cache", log=lambda _: None, progress=False
    )
    after = TeacherCache.load(tmp / "cache")
    kept = set(before.texts) <= set(after.texts) and set(mine) <= set(after.texts)
    same = kept and np.array_equal(
        after.vectors[after.rows(before.texts)].numpy(), before.vectors.numpy()
    )  # the stored vectors, not new ones
    again = sorted(calls) == sorted(set(mine) - set(taught))
    return Result(
        kept and same and again,
        data_lost=len(set(before.texts) - set(after.texts)),
        detail=f"{len(before)} taught, {len(after)} after adapt; {len(calls)} encoded again",
    )


def reencode_while_adding(tmp: Path) -> Result:
    """`index reencode` of a collection served with 4 writers (bench/reencode_while_serving.py): every add
    acknowledged before it says what it copied is in the new collection, and the count it gives is the new one's."""
    from reencode_while_serving import measure

    figures = measure(tmp, 3000, writers=4, workers=1, command=faultkit.DUPQ, env=faultkit.ENV)
    # The line that says what it copied; the next one names the model's folder, a path of this machine.
    said = next((line for line in figures["said"] if line.startswith("copied")), "")
    numbers = [int(w.replace(",", "")) for w in said.split() if w.replace(",", "").isdigit()]
    counted = len(numbers) >= 2 and numbers[0] + numbers[1] == figures["new_collection"]
    return Result(
        figures["exit"] == 0
        and figures["missing_of_all_acknowledged_before"] == 0
        and counted
        and figures["adds_during_reencode"] > 0,
        data_lost=figures["missing_of_all_acknowledged_before"],
        tracebacks=int(figures["traceback"]),
        detail=f"{figures['adds_during_reencode']} adds while it ran, {figures['missing']} missing; said: {said or 'nothing'}",
    )


CASES = [
    nested_json_in_model_files,
    nested_json_in_collection_and_teacher_files,
    export_over_an_existing_folder,
    commands_that_write_a_folder,
    adapt_cache_keeps_teacher_vectors,
    reencode_while_adding,
]
