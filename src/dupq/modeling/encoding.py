"""The encoder interface: questions to unit vectors, and the encoder's part of a model folder.

A :class:`~dupq.modeling.model.Model` is an encoder and a judge (:mod:`dupq.modeling.judge`); like
sentence-transformers' modules, each encoder names its type in ``config.json`` and writes its own
files. Three implement it: the LSTM (with an optional static branch, :mod:`dupq.modeling.lstm`), a
pretrained sentence-transformers model, and that model joined to an LSTM model
(:mod:`dupq.modeling.sentence_model`). Nothing above this interface asks which one it holds.
"""

from __future__ import annotations

import hashlib
from abc import ABC, abstractmethod
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from dupq.core.errors import DupqError

if TYPE_CHECKING:
    from dupq.modeling.kernels import Stored

# Readers of a model folder's encoder by the type config.json names: reader(folder, config) -> (encoder,
# the stored pair head or None); config is the folder's dupq.modeling.folder_format.ModelConfig, not named here so
# that this interface stays below the formats and the encoders that implement it.
# The LSTM's reads every type this registry lacks; dupq.modeling.sentence_model
# registers "sentence-transformers" (the package's __init__ imports it, so every Model.load sees it).
READERS: dict[str, Callable[[Path, Any], tuple[TextEncoder, Stored | None]]] = {}


NO_LSTM = "this needs a dupq LSTM model; a sentence-transformers model has no vocabulary or LSTM of its own."


class TextEncoder(ABC):
    """Questions to unit vectors ``(N, out_dim)``; its config, files and fingerprint in a model folder."""

    copied = False  # its files are copied byte for byte, never rewritten: a new folder is written whole
    cosine_is_judged = True  # the pair head reads the vectors it gives (not a part of them): see judged()

    @property
    @abstractmethod
    def out_dim(self) -> int:
        """The width of :meth:`encode`'s vectors."""

    @abstractmethod
    def encode(self, questions: list[str], batch_size: int | None = None) -> np.ndarray:
        """Unit vectors ``(N, out_dim)`` float32 of ``questions``; ``batch_size`` None: the encoder's own."""

    @abstractmethod
    def config_json(self) -> dict[str, Any]:
        """``config.json``'s ``encoder`` entry: its type and config."""

    def more_config(self) -> dict[str, Any]:
        """Entries of ``config.json`` beside the judge's that the encoder writes (a static branch's)."""
        return {}

    def info(self) -> dict[str, Any]:
        """What ``dupq model info`` shows of it beside its config (a vocabulary's size)."""
        return {}

    @abstractmethod
    def hashed(self) -> hashlib._Hash:
        """A sha256 of everything that decides its vectors (a new object): the model's fingerprint."""

    @abstractmethod
    def save(self, folder: Path, half: bool, head: dict[str, np.ndarray]) -> str:
        """Write its files into ``folder``, with the pair head's weights ``head`` where it stores weights;
        ``half``: float16 weights. Returns the weights' dtype name, for ``config.json``."""

    def judged(self, x: np.ndarray) -> np.ndarray:
        """The part of its vectors ``(N, out_dim)`` that the pair head reads: all of them, unless a
        static branch is joined (see ``cosine_is_judged``)."""
        return x

    def without_branch(self) -> TextEncoder:
        """This encoder without a static branch joined to its vectors (itself where none is)."""
        return self

    def lstm(self, refusal: str = NO_LSTM) -> TextEncoder:
        """The LSTM encoder this is (a :class:`dupq.modeling.lstm.LSTMEncoder`): what dupq trains, adapts and joins
        a branch to; ``refusal`` (one sentence) where it is another kind."""
        raise DupqError(refusal)


def check_list(questions: list[str]) -> None:
    """Refuse one string where a list of questions belongs (``encode("How?")`` would encode each letter)."""
    if isinstance(questions, str):
        raise DupqError("encode takes a list of questions, not one string: pass [question].")
