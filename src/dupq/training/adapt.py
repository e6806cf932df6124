"""Adapting a trained student to a help desk's own questions, without labels: the teacher shows the way.

The teacher (all-MiniLM-L6-v2 by default) encodes the help desk's questions once, into a resumable cache
(:func:`dupq.training.distil.teacher.teach`), and the student is fine-tuned on them with the ``distil`` loss, through a
projection to the teacher's width that starts as the least-squares map from the student's vectors (so the first steps
move the encoder, not a random projection). What keeps Quora's skills is how little the weights move: the defaults are
the point chosen on the out-of-domain yardstick's dev half; docs/distil.md (Adapt) lists what was measured and not kept.
A help desk of fewer than ``mix`` questions gets questions of Quora's training pool mixed in
(:func:`~dupq.training.adapt_questions.quora_questions`). The pair head, calibration and threshold stay the starting
model's (no labelled help-desk pair exists to fit them on); a static branch learns the words its table lacks
(:func:`dupq.training.distil.branch.taught_words`); the vocabulary stays the starting model's (new words land in its
unknown-word buckets, counted in ``metrics.json``).

The loop is ``dupq train``'s (:func:`dupq.training.loop.fit`); the result is written through
:func:`~dupq.modeling.model.new_model_folder`, so a failed run leaves no half folder. :func:`adapt` is the face
(``dupq.adapt``, ``dupq adapt``): it chooses the base (:func:`base_model`), mixes in Quora's questions
(:func:`mixed_in`) and loads the teacher; :func:`adapt_with` fine-tunes.

>>> model = adapt(["my tap drips", "the tap leaks", ...], "runs/adapted")   # doctest: +SKIP
"""

from __future__ import annotations

import copy
import math
import os
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from dupq.core.errors import DupqError
from dupq.data.tokenizer import Vocabulary, unspaced_scripts, word_parts
from dupq.modeling.model import Model, new_model_folder
from dupq.modeling.static import StaticBranch
from dupq.training.adapt_questions import base_model, distinct_questions, mixed_in, unknown_words, word_counts
from dupq.training.batches import Batch, length_batches
from dupq.training.config import AdaptConfig
from dupq.training.distil.branch import taught_words
from dupq.training.distil.teacher import TeacherCache, teach, teacher_bar
from dupq.training.distributed import World
from dupq.training.loop import Epoch, Loop, Update, cosine, fit
from dupq.training.objectives import Objective
from dupq.training.step import Siamese, encode_in_chunks

NOT_ADAPTABLE = "adaptation fine-tunes a dupq LSTM model; a sentence-transformers model folder cannot be adapted."


class QuestionBatches:
    """Random batches of the taught questions, each once an epoch, as rows only the distillation losses see.

    A batch source for :func:`dupq.training.loop.fit` (``epoch``, ``batch``), as
    :class:`~dupq.training.batches.PairBatches` is for labelled pairs.
    """

    def __init__(self, vocab: Vocabulary, cache: TeacherCache, batch_size: int):
        self.cache = cache
        self.encoded = vocab.encode(cache.texts)
        self.batch_size = batch_size

    def __len__(self) -> int:
        return len(self.cache)

    def epoch(self, rng: np.random.Generator) -> list[np.ndarray]:
        return length_batches(self.encoded.lengths, self.batch_size, rng)

    def batch(self, index: np.ndarray, rng: np.random.Generator) -> Batch:
        ids, lengths = self.encoded.padded(index)  # (U, L), (U,)
        return Batch(
            torch.from_numpy(ids),
            torch.from_numpy(lengths),
            torch.zeros(0),  # no pair: B = 0
            torch.full((len(index),), torch.iinfo(torch.int64).min),  # never ranked
            0,
            self.cache.vectors[torch.from_numpy(np.asarray(index))].float(),  # (U, T)
            torch.ones(len(index), dtype=torch.bool),
            len(index),
        )


@torch.no_grad()
def fit_projection(encoder: nn.Module, vocab: Vocabulary, cache: TeacherCache) -> nn.Linear:
    """The least-squares linear map from the encoder's vectors of the taught questions to the teacher's."""
    encoder.eval()
    encoded = vocab.encode(cache.texts)
    student = torch.cat(
        [
            encoder(*map(torch.from_numpy, encoded.padded(np.arange(lo, min(lo + 1024, len(cache))))))
            for lo in range(0, len(cache), 1024)
        ]
    )  # (n, d)
    solution = torch.linalg.lstsq(student.double(), cache.vectors.double()).solution  # (d, T)
    projection = nn.Linear(student.shape[1], cache.dim, bias=False)
    projection.weight.copy_(solution.T.float())
    return projection


@torch.no_grad()
def teacher_agreement(
    model: Siamese, vocab: Vocabulary, cache: TeacherCache, batch_size: int = 512, own: int | None = None
) -> dict[str, float]:
    """On the taught questions, in fixed batches: the mean cosine of the projected vectors to the teacher's
    (over all of them, and ``own_cosine`` over the first ``own``: the user's, before any mixed in), and the
    mean squared difference of the in-batch cosine matrices (how far the student's similarities are from the teacher's)."""
    model.eval()
    encoded = vocab.encode(cache.texts)
    cosines, matrix = [], []
    for lo in range(0, len(cache), batch_size):
        index = np.arange(lo, min(lo + batch_size, len(cache)))
        ids, lengths = encoded.padded(index)
        v = encode_in_chunks(model.encoder, torch.from_numpy(ids), torch.from_numpy(lengths), 1)  # (b, d)
        t = cache.vectors[lo : lo + len(index)].float()  # (b, T)
        t = t / t.norm(dim=1, keepdim=True)
        if model.projection is not None:
            cosines.append(nn.functional.cosine_similarity(model.projection(v), t).numpy())
        matrix.append(float((v @ v.T - t @ t.T).pow(2).mean()) * len(index))
    cosines = np.concatenate(cosines) if cosines else None
    return {
        "cosine_to_teacher": float(cosines.mean()) if cosines is not None else None,  # None: no projection
        "own_cosine": float(cosines[: own or len(cosines)].mean()) if cosines is not None else None,
        "matrix_error": sum(matrix) / len(cache),
    }


def adapt(
    questions,
    out: str | os.PathLike,
    model: Model | str | os.PathLike | None = None,
    *,
    teacher: str | Callable[[list[str]], np.ndarray] | None = None,
    config: AdaptConfig | None = None,
    data: str | os.PathLike | None = None,
    cache: str | os.PathLike | None = None,
    teacher_device: str = "cpu",
    info: dict[str, Any] | None = None,
    log: Callable[[str], None] = print,
    progress: bool = True,
    threads: int | None = None,
    source: str | None = None,
) -> Model:
    """Fit a model to ``questions`` (a list of texts, or an open collection) and write it to the folder ``out``.

    ``model``: the base (a model or its folder; default: the collection's model, else the bundled one,
    :func:`base_model`). ``teacher``: a sentence-transformers name or folder (default all-MiniLM-L6-v2, on
    ``teacher_device``), or a function of texts returning unit vectors. With fewer than ``config.mix`` questions,
    Quora's training questions from ``data`` are mixed in (:func:`mixed_in`). ``source`` names the questions in
    what is said (default: how many). The rest is :func:`adapt_with`'s. Returns the adapted model.
    """
    from dupq.training.distil.teacher import load_teacher

    config = config or AdaptConfig()
    collection_model = None
    if hasattr(questions, "stored_rows"):  # an open collection: its stored texts, and its model as the base
        questions, collection_model = [text for _, _, text, _ in questions.stored_rows()], questions.model
    texts = distinct_questions(list(questions))
    base = base_model(model, collection_model)
    branch = base.encoder.lstm(NOT_ADAPTABLE).branch
    encode, name = (
        load_teacher(teacher, device=teacher_device) if not callable(teacher) else (teacher, teacher.__name__)
    )
    log(
        f"adapting {'the bundled model' if base.bundled else base.folder} to {len(texts):,} questions"
        + (f" of {source}" if source is not None else "")
        + (f", its static branch ({branch.config.source}) kept and taught your new words" if branch is not None else "")
    )
    mixed = mixed_in(texts, base, config.mix, data, log)
    return adapt_with(base, texts, out, encode, name, config, cache, info, log, progress, threads, mixed)


def adapt_with(
    base: Model,
    texts: list[str],
    out: str | os.PathLike,
    encode: Callable[[list[str]], np.ndarray],
    teacher_name: str,
    config: AdaptConfig | None = None,
    cache: str | os.PathLike | None = None,
    info: dict[str, Any] | None = None,
    log: Callable[[str], None] = print,
    progress: bool = True,
    threads: int | None = None,
    mixed: list[str] | None = None,
) -> Model:
    """Fine-tune ``base`` on ``texts`` towards the teacher ``encode`` (texts -> unit vectors); write the model folder ``out``.

    ``cache`` is the folder of the teacher's vectors (default: ``OUT.teacher`` beside ``out``),
    kept so that running again with other settings does not encode the questions again.
    ``info`` is recorded in ``metrics.json`` with the adaptation; ``threads``: torch's CPU threads
    while fine-tuning (the teacher runs with the caller's); ``mixed``: other questions taught and
    trained on beside ``texts`` (:func:`~dupq.training.adapt_questions.quora_questions`, for a small help desk). A static branch
    (:mod:`dupq.modeling.static`) of ``base`` is taught the words of ``texts`` that its vocabulary lacks.
    Returns the adapted model.
    """
    config = config or AdaptConfig()
    lstm = base.encoder.lstm(NOT_ADAPTABLE)
    texts = distinct_questions(texts)
    out = Path(out)
    cache = Path(cache) if cache is not None else out.with_name(out.name + ".teacher")
    started = time.perf_counter()
    mixed = [q for q in dict.fromkeys(mixed or ()) if q not in set(texts)]
    taught = _teach(texts + mixed, cache, encode, teacher_name, progress)
    teacher_seconds = time.perf_counter() - started
    log(f"teacher {teacher_name}: {len(taught):,} questions in {teacher_seconds:.0f}s (kept in {cache})")
    before_threads = torch.get_num_threads()
    torch.set_num_threads(threads or before_threads)
    try:
        started = time.perf_counter()
        encoder, record = _fine_tune(base, taught, config, log, progress, own=len(texts))
    finally:
        torch.set_num_threads(before_threads)
    record = {
        "base": {  # the bundled model by name: its folder is wherever the package is installed
            "fingerprint": base.fingerprint(),
            "folder": None if base.bundled or base.folder is None else str(base.folder),
            "bundled": base.bundled,
        },
        "teacher": teacher_name,
        "questions": len(texts),
        "mixed_in": len(mixed),
        "words": unknown_words(lstm.vocab, texts),
        "config": asdict(config),
        **record,
        "seconds": {"teacher": teacher_seconds, "fine_tuning": time.perf_counter() - started},
        **(info or {}),
    }
    branch = lstm.branch
    if branch is not None:
        branch, record["branch_words"] = _teach_branch(branch, lstm.vocab, texts, encode, log)
    adapted = _adapted_model(base, encoder, record, branch)
    with new_model_folder(out) as tmp:
        adapted.save(tmp)
    adapted.folder = out.resolve()
    return adapted


def _fine_tune(
    base: Model, taught: TeacherCache, config: AdaptConfig, log: Callable[[str], None], progress: bool, own: int
) -> tuple[nn.Module, dict[str, Any]]:
    """The base encoder fine-tuned on ``taught`` (the loop of ``dupq train``), and what to record of it."""
    lstm = base.encoder.lstm()
    vocab, network = lstm.vocab, lstm.network
    projection = fit_projection(network, vocab, taught)
    model = Siamese(copy.deepcopy(network), None, projection)
    before = teacher_agreement(model, vocab, taught, own=own)
    source = QuestionBatches(vocab, taught, config.batch_size)
    objective, start = Objective(config.losses()), [p.detach().clone() for p in model.encoder.parameters()]
    update = Update(torch.optim.Adam(model.parameters(), lr=config.lr, fused=True), model.encoder.embedding)
    history, started = [], time.perf_counter()
    steps_per_epoch = len(source.epoch(np.random.default_rng(0)))
    log(
        f"{steps_per_epoch} steps an epoch. loss: the mean cosine distance (1 - cosine) from the student's vectors, "
        "through a linear map to the teacher's width, to the teacher's (0 = same direction); "
        "drift: the sum of squared changes of the student's weights since the start (how far it moved)"
    )

    def drift() -> torch.Tensor:
        """``sum (w - w0)^2`` over the encoder's weights: how far it moved from the start."""
        return sum((p - p0).pow(2).sum() for p, p0 in zip(model.encoder.parameters(), start))

    def loss_of(batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:  # the loss optimised, the loss logged
        return model(batch, objective, 4, World(), config.bf16)

    def after_epoch(epoch: int, done: Epoch) -> bool:
        if not math.isfinite(done.loss_sum):
            raise DupqError(f"the adaptation diverged in epoch {epoch + 1} (loss {done.loss_sum}); try a lower --lr.")
        with torch.no_grad():
            moved = float(drift())
        history.append({"epoch": epoch + 1, "train_loss": done.loss, "drift": moved, "seconds": done.seconds})
        log(f"epoch {epoch + 1}/{config.epochs}  loss {done.loss:.4f}  drift {moved:.4f}  {done.seconds:.0f}s")
        out_of_time = config.minutes and time.perf_counter() - started + done.seconds > 60 * config.minutes
        if epoch + 1 < config.epochs and out_of_time:
            log(f"stopping after {epoch + 1} epochs: another would pass --minutes {config.minutes:g}")
            return True
        return False

    loop = Loop(config.epochs, config.lr, config.seed, cosine, progress=progress)
    fit(loop, model, source, loss_of, update, after_epoch)
    after = teacher_agreement(model, vocab, taught, own=own)
    log(agreement_line(before, after, own, len(taught)))
    record = {"steps": steps_per_epoch * len(history), "epochs_run": len(history), "history": history}
    return model.encoder.cpu(), {**record, "before": before, "after": after}


def agreement_line(before: dict, after: dict, own: int, taught: int) -> str:
    """What the agreement with the teacher did, in words: before and after the fine-tuning."""
    line = (
        f"cosine to the teacher on your {own:,} questions (the student's vector through the linear map, against the "
        f"teacher's; 1 = the same direction): {before['own_cosine']:.4f} before, {after['own_cosine']:.4f} after"
    )
    if taught > own:
        line += f"; on all {taught:,} taught: {before['cosine_to_teacher']:.4f} -> {after['cosine_to_teacher']:.4f}"
    if after["own_cosine"] < before["own_cosine"]:
        line += (
            ". Lower after: the map was fitted by least squares to the starting student on these very questions, and "
            "with few questions it fits them closely; the trained student moved away from that fit. "
            "Fewer --epochs or a lower --lr keep it nearer"
        )
    return line


def _teach(texts: list[str], cache: Path, encode: Callable, name: str, progress: bool) -> TeacherCache:
    """The teacher's vectors of ``texts`` from ``cache`` (resumed, or extended by those it lacks), with a bar."""
    with teacher_bar("questions", progress) as bar:
        task = bar.add_task("teach", total=len(texts))

        def encode_with_bar(part: list[str]) -> np.ndarray:
            blocks = []
            for lo in range(0, len(part), 256):
                blocks.append(np.asarray(encode(part[lo : lo + 256]), dtype=np.float32))
                bar.advance(task, len(blocks[-1]))
            return np.concatenate(blocks)

        # Extended, never replaced: the vectors taught before (another run, `dupq distil teach`) are kept.
        return teach(texts, cache, encode_with_bar, name, extend=True).subset(texts)


def _teach_branch(
    branch: StaticBranch, vocab: Vocabulary, texts: list[str], encode: Callable[[list[str]], np.ndarray], log
) -> tuple[StaticBranch, dict[str, Any]]:
    """The static branch taught the words of ``texts`` (the user's own) that the vocabulary lacks, and what was done."""
    lacking = [w for w in word_counts(vocab, texts) if not vocab.known(w)]
    new = list(dict.fromkeys(p for w in lacking for p in word_parts(w) if not vocab.known(p)))  # as the branch reads
    unspaced = unspaced_scripts(new)
    if unspaced:
        scripts = ", ".join(f"{n:,} in {script}" for script, n in unspaced.items())
        log(
            f"warning: {scripts} of your words are written without spaces and not cut into words here: each whole "
            f"run is taught as one word, and matches only itself"
        )
    if not new:
        return branch, {"words": 0}
    taught, info = taught_words(branch, vocab, new, encode)
    if taught is None:
        log(f"the static branch keeps its table: {info['why']}, so your {len(new):,} new words stay unknown to it")
        return branch, info
    log(
        f"the static branch learned {len(new):,} words of your questions that the vocabulary lacks: the teacher's "
        f"vector of each word alone, through the map from the teacher's word vectors to the branch's rows "
        f"(fitted on {info['fitted_on']:,} of its words; cosine {info['map_cosine']:.4f}, 1 = exact)"
    )
    return taught, info


def _adapted_model(base: Model, encoder: nn.Module, record: dict[str, Any], branch: StaticBranch | None) -> Model:
    """The adapted encoder and static branch with the base model's vocabulary, pair head, calibration and threshold."""
    metrics = {k: v for k, v in base.metrics.items() if k != "test"}  # the base's test figures are not this model's
    metrics["adaptation"] = record
    return Model(base.encoder.lstm().with_network(encoder.eval()).with_branch(branch), copy.copy(base.judge), metrics)
