"""The user-facing :class:`Model`: an encoder and a judge.

The encoder (:mod:`dupq.modeling.encoding`, named in ``config.json``: the LSTM with or without a static branch, a
sentence-transformers model, or one joined to an LSTM) turns questions into unit vectors; search uses their cosine
alone. The judge (:mod:`dupq.modeling.judge`) may add a pair head (``scale * (cos - bias)``, or a small network over
InferSent's ``[|u - v|, u * v, cos]``) and a beta calibration fitted on dev pairs, so :meth:`Model.probability` reads as
a probability; the rule is :mod:`dupq.modeling.verdict`'s. A trained model is a folder
(:mod:`dupq.modeling.folder_format`); loading one imports no torch unless its encoder needs it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from dupq.core.errors import DupqError
from dupq.core.files import check_path, new_folder, readable, write_json
from dupq.data.questions import check_questions
from dupq.data.tokenizer import Vocabulary
from dupq.modeling.architecture import EncoderConfig
from dupq.modeling.encoding import READERS, TextEncoder, check_list
from dupq.modeling.folder_format import FORMAT, check_new_model_folder, read_config, read_metrics
from dupq.modeling.judge import Judge
from dupq.modeling.lstm import LSTMEncoder, read_lstm
from dupq.modeling.pretrained import resolve
from dupq.modeling.verdict import Verdicts, clip_cosines, from_vectors

ENCODE_BATCH = 128  # questions per forward pass when scoring pairs in bulk
BUNDLED = Path(__file__).parents[1] / "bundled" / "model"


class Model:
    """A duplicate-question detector: an encoder (questions to unit vectors) and a judge (pairs to verdicts).

    >>> model = Model.load()                                                     # doctest: +SKIP
    >>> model.similarity("When will I see you?", "When can I see you again?")    # doctest: +SKIP
    0.84
    >>> model.probability("When will I see you?", "When can I see you again?")   # doctest: +SKIP
    0.93
    """

    def __init__(self, encoder: TextEncoder, judge: Judge | None = None, metrics: dict[str, Any] | None = None):
        self.encoder = encoder
        self.judge = judge or Judge()
        self.metrics = metrics or {}
        self.folder: Path | None = None  # the folder it was loaded from (a collection records it)

    @classmethod
    def create(cls, vocab: Vocabulary, dim: int = 128, bidirectional: bool = False, dropout: float = 0.0) -> Model:
        """An untrained model with a fresh LSTM encoder (:class:`dupq.modeling.encoders.Encoder`)."""
        from dupq.modeling.encoders import Encoder

        config = EncoderConfig(vocab_size=len(vocab), dim=dim, bidirectional=bidirectional, dropout=dropout)
        return cls(LSTMEncoder(vocab, Encoder(config)))

    @property
    def bundled(self) -> bool:
        """Whether this is the model that ships with the package (loaded from its folder)."""
        return self.folder is not None and self.folder == BUNDLED.resolve()

    @property
    def threshold(self) -> float:
        """The judge's threshold: ``score > threshold`` is a duplicate (see :mod:`dupq.modeling.verdict`)."""
        return self.judge.threshold

    @property
    def threshold_on(self) -> str:
        """Which score the threshold applies to: ``"similarity"`` (the cosine) or ``"probability"``."""
        return self.judge.threshold_on

    @property
    def out_dim(self) -> int:
        """The width of :meth:`encode`'s vectors."""
        return self.encoder.out_dim

    def fingerprint(self) -> str:
        """A short hash of what decides the vectors: equal fingerprints encode questions alike."""
        return self.encoder.hashed().hexdigest()[:16]

    def encode(self, questions: list[str], batch_size: int | None = None) -> np.ndarray:
        """Unit vectors ``(N, out_dim)`` float32 for ``questions`` (``batch_size`` None: the encoder's own)."""
        check_list(questions)
        return self.encoder.encode(questions, batch_size)

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
        """The judged score of pairs (the cosine or the probability, as the judge's ``threshold_on`` says):
        ``score > threshold`` means duplicate."""
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

    # Persistence: a folder of JSON, safetensors and the encoder's files, each file written atomically.

    def save(self, folder: str | os.PathLike, half: bool | None = False) -> None:
        """Write the model folder; ``half`` stores the weights as float16 (half the size), None as the folder
        it was loaded from stores them (a new threshold written again, say).

        An encoder whose files are copied as they are (a transformer's) is written whole beside ``folder``
        and renamed into place, and never replaces a folder that is not a dupq model folder; into the folder
        it was loaded from, only ``config.json`` and ``metrics.json`` are written again.
        """
        folder = Path(folder)
        if half is None:
            half = self.folder is not None and read_config(self.folder).weights_dtype == "float16"
        if not self.encoder.copied:
            folder.mkdir(parents=True, exist_ok=True)
            self._write_json(folder, self.encoder.save(folder, half, self.judge.weights()))
        elif self.folder is not None and folder.resolve() == self.folder:
            self._write_json(folder, "float32")
        else:
            if half:
                raise DupqError(
                    "--half stores an LSTM's weights as float16; a sentence-transformers model is copied as it is."
                )
            check_new_model_folder(folder, overwrite=True)
            with new_folder(folder) as tmp:
                weights_dtype = self.encoder.save(tmp, half, self.judge.weights())
                readable(tmp)
                self._write_json(tmp, weights_dtype)

    def _write_json(self, folder: Path, weights_dtype: str) -> None:
        """``metrics.json`` and ``config.json`` (the encoder, how pairs are judged, the weights' precision)."""
        write_json(folder / "metrics.json", self.metrics)
        config = {"format": FORMAT, "encoder": self.encoder.config_json()} | self.judge.config_json()
        write_json(folder / "config.json", config | {"weights_dtype": weights_dtype} | self.encoder.more_config())

    @classmethod
    def load(cls, folder: str | os.PathLike | None = None) -> Model:
        """Load a model folder; with no folder, the model bundled with the package; ``"minilm"`` or ``"mpnet"``:
        that transformer from its packages (:func:`~dupq.modeling.pretrained.resolve`)."""
        folder = _existing_model_folder(folder)
        config = read_config(folder)
        metrics = read_metrics(folder)
        encoder, head = READERS.get(config.kind, read_lstm)(folder, config)
        model = cls(encoder, Judge(head, **config.judging()), metrics)
        model.folder = folder.resolve()
        return model


@contextmanager
def new_model_folder(out: str | os.PathLike) -> Iterator[Path]:
    """A hidden folder to write a model into, loaded back before it is renamed into place as ``out``
    (:func:`~dupq.core.files.new_folder`): a folder that would not load never replaces one that does.

    >>> with new_model_folder("runs/copy") as tmp:                               # doctest: +SKIP
    ...     model.save(tmp)
    """
    with new_folder(out) as tmp:
        yield tmp
        try:
            Model.load(tmp)
        except DupqError as e:
            raise DupqError(f"the model written for {out} does not load, so {out} is left as it was: {e}") from None


def _existing_model_folder(folder: str | os.PathLike | None) -> Path:
    """``folder`` (default: the bundled model; a name of :data:`~dupq.modeling.pretrained.NAMES`: its folder
    in the cache) as a path, refused when it is missing or empty."""
    if folder is None:
        folder = BUNDLED
        if not (folder / "config.json").is_file():
            raise DupqError("this install has no bundled model; train one with `dupq train` and pass its folder.")
    folder = resolve(folder)
    check_path(folder, "model folder", folder=True)
    if not folder.is_dir():
        raise DupqError(f"model folder {folder} does not exist.")
    if not any(folder.iterdir()):
        raise DupqError(f"model folder {folder} is empty; it needs config.json, vocab.json and model.safetensors.")
    return folder
