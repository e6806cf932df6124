"""The user-facing :class:`Model`: vocabulary + question encoder + pair head + threshold.

One encoder with shared weights reads both questions of a pair (a Siamese network); which encoder
(the LSTM, a GRU, ...) is a registered part named in ``config.json``, see
:mod:`dupq.modeling.encoders`. Two questions are compared by the dot product of their unit vectors, which
is their cosine similarity: search uses nothing else.

Judging a *pair* can use more than the cosine. A model trained on labelled pairs carries a
:class:`PairHead` that turns two vectors into a logit, either ``scale * (cos - bias)`` or a small
network over ``[|u - v|, u * v, cos]`` (InferSent's pair features, symmetric in u and v), and a
beta calibration ``p = sigmoid(a ln s - b ln(1 - s) + c)``, ``s = sigmoid(logit)``, fitted on the
dev pairs (:func:`dupq.modeling.calibration.fit_calibration`), so that :meth:`Model.probability` is a
probability one can read as such.

A trained model is a folder: ``config.json`` (architecture, threshold, calibration),
``vocab.json`` (with ``tokenizer.json`` beside it for the teacher's WordPiece tokens,
:mod:`dupq.data.wordpiece`), ``model.safetensors`` (weights) and ``metrics.json`` (how it was
trained and what it scored). A folder whose encoder type is ``"sentence-transformers"`` holds a
pretrained sentence encoder instead of the vocabulary and weights; :meth:`Model.load` returns it
as a :class:`dupq.modeling.sentence_model.SentenceModel`, which every entry point uses like any model.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save

from dupq.core.files import DupqError, atomic_write, check_path, write_json
from dupq.data.tokenizer import check_questions
from dupq.data.wordpiece import AnyVocabulary, load_vocabulary
from dupq.modeling.encoders import ENCODERS, Encoder, EncoderConfig
from dupq.modeling.formats import FORMAT, ModelConfig, read_config, read_metrics
from dupq.modeling.heads import PairHead
from dupq.modeling.kernels import Kernels
from dupq.modeling.verdict import SEED_THRESHOLD, SIMILARITY, Verdicts, from_vectors

# Readers of model folders whose encoder is not one of ENCODERS: encoder type -> reader(folder, config,
# metrics=..., **judging), config a dupq.modeling.formats.ModelConfig. dupq.modeling.sentence_model
# registers "sentence-transformers" (the package's __init__ imports it, so every Model.load sees it).
READERS: dict[str, Callable[..., Model]] = {}
ENCODE_BATCH = 128  # questions per forward pass when scoring pairs in bulk
FEW = 64  # up to this many questions are encoded as one batch, unsorted (a row's vector does not depend on the others)
BUNDLED = Path(__file__).parents[1] / "bundled" / "model"


class Model:
    """A duplicate-question detector: vocabulary, encoder, optional pair head, calibration, threshold.

    >>> model = Model.load()                                                     # doctest: +SKIP
    >>> model.similarity("When will I see you?", "When can I see you again?")    # doctest: +SKIP
    0.84
    >>> model.probability("When will I see you?", "When can I see you again?")   # doctest: +SKIP
    0.93

    ``threshold`` applies to :meth:`scores`: the cosine when ``threshold_on`` is ``"similarity"`` (the
    seed's rule ``d > threshold``), the calibrated probability when it is ``"probability"``; the rule,
    for every entry point, is :mod:`dupq.modeling.verdict`'s.
    """

    def __init__(
        self,
        vocab: AnyVocabulary | None,
        encoder: Encoder | None,
        threshold: float = SEED_THRESHOLD,
        threshold_info: dict[str, Any] | None = None,
        metrics: dict[str, Any] | None = None,
        head: PairHead | None = None,
        calibration: dict[str, float] | None = None,
        threshold_on: str = SIMILARITY,
    ):
        self.vocab = vocab  # None, like encoder, in a model that brings its own (dupq.modeling.sentence_model)
        self.encoder = encoder.eval() if encoder is not None else None
        self.head = head.eval() if head is not None else None
        self.calibration = calibration  # {"method": "beta", "a", "b", "c"}, fitted on dev pairs (see calibrated())
        self.threshold = threshold
        self.threshold_on = threshold_on  # "similarity" or "probability": what the threshold is compared with
        self.threshold_info = threshold_info or {"chosen_on": "the seeds' fixed value"}
        self.metrics = metrics or {}
        self.folder: Path | None = None  # the folder it was loaded from (a collection records it)
        self.kernels: Kernels | None = Kernels()  # NumPy forward passes on the CPU (None: torch for every one)

    @classmethod
    def create(
        cls,
        vocab: AnyVocabulary,
        dim: int = 128,
        bidirectional: bool = False,
        dropout: float = 0.0,
        encoder: str = "lstm",
    ) -> Model:
        """An untrained model with a fresh encoder of the registered type ``encoder`` (see :data:`dupq.modeling.encoders.ENCODERS`)."""
        config = EncoderConfig(vocab_size=len(vocab), dim=dim, bidirectional=bidirectional, dropout=dropout)
        return cls(vocab, ENCODERS[encoder](config))

    @property
    def bundled(self) -> bool:
        """Whether this is the model that ships with the package (loaded from its folder)."""
        return self.folder is not None and self.folder == BUNDLED.resolve()

    @property
    def config(self) -> EncoderConfig:
        return self.encoder.config

    def encoder_config(self) -> dict[str, Any]:
        """What ``config.json`` records of the encoder: its registered type and its config."""
        return {"type": self.encoder.type, **asdict(self.config)}

    def fingerprint(self) -> str:
        """A short hash of the weights and vocabulary: equal fingerprints encode questions alike."""
        digest = hashlib.sha256(json.dumps([self.vocab.tokens, self.vocab.lowercase, asdict(self.config)]).encode())
        for name, tensor in sorted(self.encoder.state_dict().items()):
            digest.update(name.encode())
            digest.update(tensor.detach().float().contiguous().numpy().tobytes())
        return digest.hexdigest()[:16]

    @torch.inference_mode()
    def encode(self, questions: list[str], batch_size: int = 1024) -> np.ndarray:
        """Unit vectors ``(N, d)`` float32 for ``questions``, encoded in length-sorted batches.

        Up to :data:`FEW` questions (a search's queries) are one batch in their own order: the
        same padded batch the sorted path would make, without sorting and scattering it back. Up to
        :data:`~dupq.modeling.kernels.FEW_QUESTIONS` of them go through the NumPy forward pass
        (:mod:`dupq.modeling.kernels`) where the encoder has one.
        """
        check_list(questions)
        if self.encoder.training:
            self.encoder.eval()
        encoded = self.vocab.encode(questions)
        if 0 < len(questions) <= min(FEW, batch_size):
            ids, lengths = encoded.padded(np.arange(len(questions)))  # (B, L), (B,)
            kernel = self.kernels and self.kernels.encoder(self.encoder, len(questions))
            if kernel:
                return kernel(ids, lengths)
            return self.encoder(torch.from_numpy(ids), torch.from_numpy(lengths)).float().numpy()
        order = np.argsort(encoded.lengths, kind="stable")
        out = np.empty((len(questions), self.config.out_dim), dtype=np.float32)
        for start in range(0, len(order), batch_size):
            index = order[start : start + batch_size]
            ids, lengths = encoded.padded(index)
            out[index] = self.encoder(torch.from_numpy(ids), torch.from_numpy(lengths)).float().numpy()
        return out

    def _pair_vectors(self, q1: str | list[str], q2: str | list[str]) -> tuple[bool, np.ndarray, np.ndarray]:
        single = isinstance(q1, str) and isinstance(q2, str)
        a, b = ([q1], [q2]) if single else (list(q1), list(q2))
        if single:  # a pair from a user gets the rule of every entry point; lists are bulk scoring, as in evaluate
            check_questions(a + b)
        if len(a) != len(b):
            raise DupqError(f"a pair needs lists of equal length, got {len(a)} and {len(b)}.")
        v = self.encode(a + b)
        return single, v[: len(a)], v[len(a) :]

    def similarity(self, q1: str | list[str], q2: str | list[str]) -> float | np.ndarray:
        """Cosine similarity of two questions (a float), or of two equal-length lists (an array)."""
        single, u, v = self._pair_vectors(q1, q2)
        sims = np.clip(np.einsum("nd,nd->n", u, v), -1.0, 1.0)  # (N,)
        return float(sims[0]) if single else sims

    @torch.inference_mode()
    def logits_from_vectors(self, u: np.ndarray, v: np.ndarray) -> np.ndarray:
        """The uncalibrated pair logit ``(N,)`` of vector pairs: the head's, or the cosine without one."""
        if self.head is None:
            return np.einsum("nd,nd->n", u, v).astype(np.float64)
        kernel = self.kernels and self.kernels.head(self.head)  # NumPy on the CPU: less overhead per call
        if kernel:
            return kernel(np.asarray(u, np.float32), np.asarray(v, np.float32))
        return (
            self.head(torch.from_numpy(np.asarray(u, np.float32)), torch.from_numpy(np.asarray(v, np.float32)))
            .double()
            .numpy()
        )

    def verdicts(self, q1: str | list[str], q2: str | list[str], threshold: float | None = None) -> Verdicts:
        """The judgement of two questions, or of two equal-length lists (see :mod:`dupq.modeling.verdict`)."""
        _, u, v = self._pair_vectors(q1, q2)
        return from_vectors(self, u, v, threshold)

    def probability(self, q1: str | list[str], q2: str | list[str]) -> float | np.ndarray:
        """Calibrated probability in [0, 1] that two questions are duplicates (a float, or an array for lists)."""
        single, u, v = self._pair_vectors(q1, q2)
        p = from_vectors(self, u, v).required_probability()
        return float(p[0]) if single else p

    def scores(self, q1: str | list[str], q2: str | list[str]) -> float | np.ndarray:
        """The judged score of pairs (see the class docstring): ``score > threshold`` means duplicate."""
        single, u, v = self._pair_vectors(q1, q2)
        s = from_vectors(self, u, v, probability=False).score
        return float(s[0]) if single else s

    def is_duplicate(
        self, q1: str | list[str], q2: str | list[str], threshold: float | None = None
    ) -> bool | np.ndarray:
        """True when the score is above the threshold (the model's own unless one is given); an array for lists."""
        single, u, v = self._pair_vectors(q1, q2)
        d = from_vectors(self, u, v, threshold, probability=False).duplicate
        return bool(d[0]) if single else d

    # Persistence: a folder of JSON and safetensors, each file written atomically.

    def save(self, folder: str | os.PathLike, half: bool = False) -> None:
        """Write the model folder; ``half`` stores the weights as float16 (half the size)."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        dtype = torch.float16 if half else torch.float32
        weights = {k: v.detach().to(dtype).contiguous() for k, v in self.encoder.state_dict().items()}
        if self.head is not None:
            weights.update({f"head.{k}": v.detach().to(dtype).contiguous() for k, v in self.head.state_dict().items()})
        atomic_write(folder / "model.safetensors", save(weights, metadata={"format": FORMAT}))
        self.vocab.save(folder / "vocab.json")
        write_json(folder / "metrics.json", self.metrics)
        self._write_config(folder, str(dtype).removeprefix("torch."))

    def _write_config(self, folder: Path, weights_dtype: str) -> None:
        """``config.json``: the encoder, the pair head, and how pairs are judged (calibration, threshold)."""
        write_json(
            folder / "config.json",
            {
                "format": FORMAT,
                "encoder": self.encoder_config(),
                "head": asdict(self.head.config) if self.head is not None else None,
                "calibration": self.calibration,
                "threshold": self.threshold,
                "threshold_on": self.threshold_on,
                "threshold_info": self.threshold_info,
                "weights_dtype": weights_dtype,
            },
        )

    def save_again(self, folder: str | os.PathLike) -> None:
        """Write the folder the model was loaded from again (a new threshold, say), keeping the
        weights' stored precision (float16 or float32)."""
        self.save(folder, half=read_config(Path(folder)).weights_dtype == "float16")

    @classmethod
    def load(cls, folder: str | os.PathLike | None = None) -> Model:
        """Load a model folder; with no folder, the model bundled with the package.

        A sentence-transformers model folder (``dupq distil export``) loads as a
        :class:`~dupq.modeling.sentence_model.SentenceModel`.
        """
        folder = _existing_model_folder(folder)
        config = read_config(folder)
        metrics = read_metrics(folder)
        reader = READERS.get(config.kind)
        if reader is not None:  # a model that brings its own encoder (dupq.modeling.sentence_model)
            model = reader(folder, config, metrics=metrics, **config.judging())
        else:
            vocab = load_vocabulary(folder / "vocab.json")
            if len(vocab) != config.encoder.vocab_size:
                raise DupqError(
                    f"{folder}: vocab.json has {len(vocab)} {vocab.UNIT} but the config says {config.encoder.vocab_size}."
                )
            encoder, head = _load_weights(folder, config)
            model = cls(vocab, encoder, metrics=metrics, head=head, **config.judging())
        model.folder = folder.resolve()
        return model


def check_list(questions: list[str]) -> None:
    """Refuse one string where a list of questions belongs (``encode("How?")`` would encode each letter)."""
    if isinstance(questions, str):
        raise DupqError("encode takes a list of questions, not one string: pass [question].")


def _existing_model_folder(folder: str | os.PathLike | None) -> Path:
    """``folder`` (default: the bundled model) as a path, refused when it is missing or empty."""
    if folder is None:
        folder = BUNDLED
        if not (folder / "config.json").is_file():
            raise DupqError("this install has no bundled model; train one with `dupq train` and pass its folder.")
    folder = Path(folder)
    check_path(folder, "model folder", folder=True)
    if not folder.is_dir():
        raise DupqError(f"model folder {folder} does not exist.")
    if not any(folder.iterdir()):
        raise DupqError(f"model folder {folder} is empty; it needs config.json, vocab.json and model.safetensors.")
    return folder


def _load_weights(folder: Path, config: ModelConfig) -> tuple[Encoder, PairHead | None]:
    """The encoder and pair head of ``config`` with the weights of ``folder/model.safetensors``, refused when not finite or not fitting."""
    weights_path = folder / "model.safetensors"
    if not weights_path.is_file():
        raise DupqError(f"the weights of {folder} are missing: {weights_path} does not exist.")
    try:
        weights = load_file(weights_path)
    except (SafetensorError, OSError, ValueError) as e:
        raise DupqError(f"{weights_path} is corrupt ({e}).") from None
    bad = sorted(k for k, v in weights.items() if v.is_floating_point() and not bool(torch.isfinite(v).all()))
    if bad:
        raise DupqError(f"{weights_path} is corrupt: {bad[0]} holds numbers that are not finite.")
    encoder = ENCODERS[config.kind](config.encoder)
    head = PairHead(config.head) if config.head is not None else None
    try:
        encoder.load_state_dict({k: v.float() for k, v in weights.items() if not k.startswith("head.")})
        if head is not None:
            head.load_state_dict(
                {k.removeprefix("head."): v.float() for k, v in weights.items() if k.startswith("head.")}
            )
    except RuntimeError as e:
        detail = " ".join(line.strip() for line in str(e).strip().splitlines()[1:3]) or str(e).strip()
        raise DupqError(f"{weights_path} does not match {folder / 'config.json'}: {detail[:300]}") from None
    return encoder, head
