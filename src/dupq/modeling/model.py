"""The user-facing :class:`Model`: vocabulary + question encoder + pair head + threshold.

One encoder with shared weights reads both questions of a pair (a Siamese network); which encoder
(the LSTM today) is a registered part named in ``config.json``, see
:mod:`dupq.modeling.encoders`. Two questions are compared by the dot product of their unit vectors, which
is their cosine similarity: search uses nothing else.

Judging a *pair* can use more than the cosine. A model trained on labelled pairs carries a
:class:`PairHead` that turns two vectors into a logit, either ``scale * (cos - bias)`` or a small
network over ``[|u - v|, u * v, cos]`` (InferSent's pair features, symmetric in u and v), and a
beta calibration ``p = sigmoid(a ln s - b ln(1 - s) + c)``, ``s = sigmoid(logit)``, fitted on the
dev pairs (:func:`dupq.modeling.probability.fit_calibration`), so that :meth:`Model.probability` is a
probability one can read as such.

A trained model is a folder: ``config.json`` (architecture, threshold, calibration),
``vocab.json`` (the words, :mod:`dupq.data.tokenizer`), ``model.safetensors`` (weights) and ``metrics.json`` (how it was
trained and what it scored). A folder whose encoder type is ``"sentence-transformers"`` holds a
pretrained sentence encoder instead of the vocabulary and weights; :meth:`Model.load` returns it
as a :class:`dupq.modeling.sentence_model.SentenceModel`, which every entry point uses like any model.
A folder may also hold a static branch (``static.safetensors``, :mod:`dupq.modeling.static`) whose
per-word vectors are joined to the encoder's; the pair head still reads the encoder's half.

Loading a folder imports no torch: the weights are read as NumPy arrays (``safetensors.numpy``)
and a few questions are encoded, and pairs judged, by the NumPy kernels
(:mod:`dupq.modeling.kernels`). The torch modules, the definition, are built from those arrays
the first time something needs them: a batch of more than
:data:`~dupq.modeling.kernels.FEW_QUESTIONS` questions, training, a GPU. So ``dupq predict`` and
``dupq search`` start without paying for ``import torch``, and bulk encoding stays torch's.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from safetensors.numpy import save

from dupq.core.errors import DupqError
from dupq.core.files import atomic_write, check_path, write_json
from dupq.core.threads import import_torch
from dupq.data.questions import check_questions
from dupq.data.tokenizer import Encoded, Vocabulary
from dupq.modeling.architecture import EncoderConfig, HeadConfig
from dupq.modeling.folder_format import FORMAT, ModelConfig, read_config, read_metrics, read_weights
from dupq.modeling.kernels import Kernels, Stored, arrays
from dupq.modeling.static import WEIGHTS as STATIC_WEIGHTS
from dupq.modeling.static import StaticBranch
from dupq.modeling.verdict import SEED_THRESHOLD, SIMILARITY, Verdicts, clip_cosines, from_vectors

if TYPE_CHECKING:
    from dupq.modeling.encoders import Encoder
    from dupq.modeling.heads import PairHead

# Readers of model folders whose encoder is not one of ENCODERS: encoder type -> reader(folder, config,
# metrics=..., **judging), config a dupq.modeling.folder_format.ModelConfig. dupq.modeling.sentence_model
# registers "sentence-transformers" (the package's __init__ imports it, so every Model.load sees it).
READERS: dict[str, Callable[..., Model]] = {}
ENCODE_BATCH = 128  # questions per forward pass when scoring pairs in bulk
FEW = 64  # up to this many questions are encoded as one batch, unsorted (a row's vector does not depend on the others)
BUNDLED = Path(__file__).parents[1] / "bundled" / "model"
_BUILDING = threading.Lock()  # two threads that need torch at once build a model's modules once


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
        vocab: Vocabulary | None,
        encoder: Encoder | Stored | None,
        threshold: float = SEED_THRESHOLD,
        threshold_info: dict[str, Any] | None = None,
        metrics: dict[str, Any] | None = None,
        head: PairHead | Stored | None = None,
        calibration: dict[str, float] | None = None,
        threshold_on: str = SIMILARITY,
        static: StaticBranch | None = None,
    ):
        self.vocab = vocab  # None, like encoder, in a model that brings its own (dupq.modeling.sentence_model)
        # The torch modules, or what Model.load read of them (Stored: NumPy arrays) until torch is needed.
        self._encoder = encoder.eval() if encoder is not None and not isinstance(encoder, Stored) else encoder
        self._head = head.eval() if head is not None and not isinstance(head, Stored) else head
        self.calibration = calibration  # {"method": "beta", "a", "b", "c"}, fitted on dev pairs (see calibrated())
        self.threshold = threshold
        self.threshold_on = threshold_on  # "similarity" or "probability": what the threshold is compared with
        self.threshold_info = threshold_info or {"chosen_on": "the seeds' fixed value"}
        self.metrics = metrics or {}
        self.folder: Path | None = None  # the folder it was loaded from (a collection records it)
        self.kernels: Kernels | None = Kernels()  # NumPy forward passes on the CPU (None: torch for every one)
        self.static = static  # the static branch joined to every vector (dupq.modeling.static); None: none

    @classmethod
    def create(
        cls,
        vocab: Vocabulary,
        dim: int = 128,
        bidirectional: bool = False,
        dropout: float = 0.0,
    ) -> Model:
        """An untrained model with a fresh LSTM encoder (:class:`dupq.modeling.encoders.Encoder`)."""
        from dupq.modeling.encoders import Encoder

        config = EncoderConfig(vocab_size=len(vocab), dim=dim, bidirectional=bidirectional, dropout=dropout)
        return cls(vocab, Encoder(config))

    def replaced(self, **parts: Any) -> Model:
        """A new model of this one's parts (vocabulary, encoder, head, static branch, metrics) and judging
        settings, with ``parts`` (the constructor's arguments) put in their place."""
        kept = {
            "vocab": self.vocab,
            "encoder": self._encoder,
            "threshold": self.threshold,
            "threshold_info": self.threshold_info,
            "metrics": self.metrics,
            "head": self._head,
            "calibration": self.calibration,
            "threshold_on": self.threshold_on,
            "static": self.static,
        }
        return Model(**{**kept, **parts})

    @property
    def bundled(self) -> bool:
        """Whether this is the model that ships with the package (loaded from its folder)."""
        return self.folder is not None and self.folder == BUNDLED.resolve()

    @property
    def encoder(self) -> Encoder | None:
        """The torch encoder (built from the loaded weights on first use: this imports torch)."""
        self._modules()
        return self._encoder

    @property
    def head(self) -> PairHead | None:
        """The torch pair head, or None (built from the loaded weights on first use: this imports torch)."""
        self._modules()
        return self._head

    @property
    def head_config(self) -> HeadConfig | None:
        """The pair head's config (None: the cosine judges pairs), without building the head."""
        return None if self._head is None else self._head.config

    def _modules(self) -> None:
        """Build the torch modules from the weights Model.load read, once (torch stays the definition)."""
        if not isinstance(self._encoder, Stored) and not isinstance(self._head, Stored):
            return
        with _BUILDING:
            if isinstance(self._encoder, Stored):
                self._encoder = _module(self._encoder)
            if isinstance(self._head, Stored):
                self._head = _module(self._head)

    @property
    def config(self) -> EncoderConfig:
        return self._encoder.config

    @property
    def out_dim(self) -> int:
        """The width of :meth:`encode`'s vectors: the encoder's, plus the static branch's."""
        return self.config.out_dim + (self.static.dim if self.static is not None else 0)

    def encoder_config(self) -> dict[str, Any]:
        """What ``config.json`` records of the encoder: its registered type and its config."""
        return {"type": self._encoder.type, **asdict(self.config)}

    def weights(self) -> dict[str, np.ndarray]:
        """Every weight by its ``model.safetensors`` name (the head's prefixed ``head.``), float32 NumPy
        arrays: the loaded ones, or the torch modules' current ones."""
        parts = {"": self._encoder, "head.": self._head}
        return {
            prefix + name: array
            for prefix, part in parts.items()
            if part is not None
            for name, array in (part.weights if isinstance(part, Stored) else _cpu_arrays(part)).items()
        }

    def fingerprint(self) -> str:
        """A short hash of the weights and vocabulary: equal fingerprints encode questions alike."""
        digest = hashlib.sha256(json.dumps([self.vocab.tokens, self.vocab.lowercase, asdict(self.config)]).encode())
        for name, array in sorted(self.weights().items()):
            if not name.startswith("head."):
                digest.update(name.encode())
                digest.update(np.asarray(array, np.float32, order="C").tobytes())
        if self.static is not None:
            self.static.digest(digest)
        return digest.hexdigest()[:16]

    def encode(self, questions: list[str], batch_size: int = 1024) -> np.ndarray:
        """Unit vectors ``(N, d)`` float32 for ``questions``, encoded in length-sorted batches.

        Up to :data:`FEW` questions (a search's queries) are one batch in their own order: the
        same padded batch the sorted path would make, without sorting and scattering it back. Up to
        :data:`~dupq.modeling.kernels.FEW_QUESTIONS` of them go through the NumPy forward pass
        (:mod:`dupq.modeling.kernels`) where the encoder has one. A model with a static branch
        joins its vector to the encoder's (:meth:`~dupq.modeling.static.StaticBranch.join`).
        """
        check_list(questions)
        if getattr(self._encoder, "training", False):
            self._encoder.eval()
        encoded = self.vocab.encode(questions)
        u = self._encoder_vectors(encoded, batch_size)  # (N, d)
        if self.static is None:
            return u
        return self.static.join(u, self.static.vectors(self.vocab, encoded, questions))  # (N, d + e)

    def _encoder_vectors(self, encoded: Encoded, batch_size: int) -> np.ndarray:
        """The encoder's unit vectors ``(N, d)`` of encoded questions (see :meth:`encode`)."""
        n = len(encoded)
        if 0 < n <= min(FEW, batch_size):
            ids, lengths = encoded.padded(np.arange(n))  # (B, L), (B,)
            kernel = self.kernels and self.kernels.encoder(self._encoder, n)
            if kernel:
                return kernel(ids, lengths)
            return self._torch_encode(ids, lengths)
        order = np.argsort(encoded.lengths, kind="stable")
        out = np.empty((n, self.config.out_dim), dtype=np.float32)
        for start in range(0, len(order), batch_size):
            index = order[start : start + batch_size]
            out[index] = self._torch_encode(*encoded.padded(index))
        return out

    def _torch_encode(self, ids: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        """Unit vectors ``(B, d)`` of right-padded ids ``(B, L)`` by the torch encoder."""
        torch, encoder = import_torch(), self.encoder
        with torch.inference_mode():
            return encoder(torch.from_numpy(ids), torch.from_numpy(lengths)).float().numpy()

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
        sims = clip_cosines(np.einsum("nd,nd->n", u, v))  # (N,)
        return float(sims[0]) if single else sims

    def logits_from_vectors(self, u: np.ndarray, v: np.ndarray) -> np.ndarray:
        """The uncalibrated pair logit ``(N,)`` of vector pairs: the head's, or the cosine without one."""
        if self.static is not None:  # the head reads the model's own half of a joined vector
            u, v = (self.static.model_half(x, self.config.out_dim) for x in (u, v))
        if self._head is None:
            return np.einsum("nd,nd->n", u, v).astype(np.float64)
        u, v = np.asarray(u, np.float32), np.asarray(v, np.float32)
        kernel = self.kernels and self.kernels.head(self._head)  # NumPy on the CPU: less overhead per call
        if kernel:
            return kernel(u, v)
        torch, head = import_torch(), self.head
        with torch.inference_mode():
            return head(torch.from_numpy(u), torch.from_numpy(v)).double().numpy()

    def logits_from_cosines(self, cosines: np.ndarray) -> np.ndarray:
        """The pair logit ``(N,)`` from the cosines alone, for a model whose head does not read the vectors
        (:func:`dupq.modeling.verdict.needs_vectors`): the cosine, or a cosine head's ``scale * (cos - bias)``."""
        cos = np.asarray(cosines, dtype=np.float64)
        if self._head is None:
            return cos
        kernel = self.kernels and self.kernels.head(self._head)
        if kernel:
            return kernel.from_cosines(cos)
        return self.head.scale.item() * (cos - self.head.bias.item())

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
        dtype = np.float16 if half else np.float32
        weights = {k: np.asarray(v, dtype, order="C") for k, v in self.weights().items()}
        atomic_write(folder / "model.safetensors", save(weights, metadata={"format": FORMAT}))
        if self.static is not None:
            self.static.save(folder, half)
        elif (folder / STATIC_WEIGHTS).exists():
            (folder / STATIC_WEIGHTS).unlink()  # a branch this model no longer has
        self.vocab.save(folder / "vocab.json")
        write_json(folder / "metrics.json", self.metrics)
        self._write_config(folder, np.dtype(dtype).name)

    def _write_config(self, folder: Path, weights_dtype: str) -> None:
        """``config.json``: the encoder, the pair head, and how pairs are judged (calibration, threshold)."""
        write_json(
            folder / "config.json",
            {
                "format": FORMAT,
                "encoder": self.encoder_config(),
                "head": asdict(self.head_config) if self.head_config is not None else None,
                "calibration": self.calibration,
                "threshold": self.threshold,
                "threshold_on": self.threshold_on,
                "threshold_info": self.threshold_info,
                "weights_dtype": weights_dtype,
            }
            | ({"static": self.static.config_json()} if self.static is not None else {}),
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
            vocab = Vocabulary.load(folder / "vocab.json")
            if len(vocab) != config.encoder.vocab_size:
                raise DupqError(
                    f"{folder}: vocab.json has {len(vocab)} {vocab.UNIT} but the config says {config.encoder.vocab_size}."
                )
            encoder, head = _load_weights(folder, config)
            static = None if config.static is None else StaticBranch.load(folder, config.static, len(vocab))
            model = cls(vocab, encoder, metrics=metrics, head=head, static=static, **config.judging())  # torch-free
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


def _load_weights(folder: Path, config: ModelConfig) -> tuple[Stored, Stored | None]:
    """The encoder and pair head of ``config`` with the checked weights of ``folder/model.safetensors``."""
    part: dict[str, dict[str, np.ndarray]] = {"": {}, "head.": {}}
    for name, array in read_weights(folder, config).items():
        prefix = "head." if name.startswith("head.") else ""
        part[prefix][name.removeprefix(prefix)] = array
    head = Stored("head", config.head, part["head."]) if config.head is not None else None
    return Stored(config.kind, config.encoder, part[""]), head


def _module(part: Stored):
    """The torch module of a stored part, holding its weights (this imports torch)."""
    torch = import_torch()
    from dupq.modeling.encoders import ENCODERS
    from dupq.modeling.heads import PairHead

    with torch.inference_mode(False):  # trainable parameters, even when first needed under inference mode
        module = PairHead(part.config) if part.type == "head" else ENCODERS[part.type](part.config)
        module.load_state_dict({k: torch.tensor(v) for k, v in part.weights.items()})
    return module.eval()


def _cpu_arrays(module) -> dict[str, np.ndarray]:
    """A torch module's weights as float32 NumPy arrays (copied from a GPU, or from float16)."""
    if any(p.device.type != "cpu" or p.dtype != import_torch().float32 for p in module.state_dict().values()):
        return {k: v.detach().float().cpu().numpy() for k, v in module.state_dict().items()}
    return arrays(module)
