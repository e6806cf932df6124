"""The LSTM encoder of a dupq model: the vocabulary, the network, its NumPy kernels and an optional static branch.

One network with shared weights reads both questions of a pair (Siamese): word ids from
``vocab.json``, the torch module of :mod:`dupq.modeling.encoders`, unit vectors whose dot product
is the search's cosine. A static branch (:mod:`dupq.modeling.static`) is joined to those vectors;
the pair head still reads the network's half (:meth:`LSTMEncoder.judged`).

Loading a folder imports no torch: the weights are read as NumPy arrays and a few questions are
encoded by :mod:`dupq.modeling.kernels`; the torch module is built from those arrays the first time
something needs it (more than :data:`~dupq.modeling.kernels.FEW_QUESTIONS` questions, training, a GPU).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from safetensors.numpy import save

from dupq.core.errors import DupqError
from dupq.core.files import atomic_write
from dupq.core.threads import import_torch
from dupq.data.tokenizer import Encoded, Vocabulary
from dupq.modeling.architecture import EncoderConfig
from dupq.modeling.encoding import TextEncoder
from dupq.modeling.folder_format import FORMAT, ModelConfig, read_weights
from dupq.modeling.judge import HEAD_PREFIX
from dupq.modeling.kernels import Kernels, Stored, build_once, cpu_arrays
from dupq.modeling.static import WEIGHTS as STATIC_WEIGHTS
from dupq.modeling.static import StaticBranch

if TYPE_CHECKING:
    from dupq.modeling.encoders import Encoder

ENCODE_BATCH = 1024  # questions per forward pass when encoding in bulk
FEW = 64  # up to this many questions are encoded as one batch, unsorted (a row's vector does not depend on the others)


class LSTMEncoder(TextEncoder):
    """``vocab`` -> ``network`` (a torch :class:`~dupq.modeling.encoders.Encoder`, or its :class:`Stored`
    weights until torch is needed) -> unit vectors, joined with ``branch``'s when it has one."""

    def __init__(self, vocab: Vocabulary, network: Encoder | Stored, branch: StaticBranch | None = None):
        self.vocab = vocab
        self._network = network.eval() if not isinstance(network, Stored) else network
        self.branch = branch  # the static branch joined to every vector (dupq.modeling.static); None: none
        self.kernels: Kernels | None = Kernels()  # NumPy forward passes on the CPU (None: torch for every one)

    @property
    def network(self) -> Encoder:
        """The torch encoder (built from the loaded weights on first use: this imports torch)."""
        return build_once(self, "_network")

    @property
    def config(self) -> EncoderConfig:
        return self._network.config

    @property
    def out_dim(self) -> int:
        """The network's width, plus the static branch's."""
        return self.config.out_dim + (self.branch.dim if self.branch is not None else 0)

    @property
    def cosine_is_judged(self) -> bool:
        return self.branch is None

    def lstm(self, refusal: str = "") -> LSTMEncoder:
        return self

    def with_branch(self, branch: StaticBranch | None) -> LSTMEncoder:
        """This vocabulary and network with ``branch`` joined (None: without one)."""
        return LSTMEncoder(self.vocab, self._network, branch)

    def without_branch(self) -> LSTMEncoder:
        return self.with_branch(None)

    def with_network(self, network: Encoder) -> LSTMEncoder:
        """This vocabulary and branch with another network (a fine-tuned copy)."""
        return LSTMEncoder(self.vocab, network, self.branch)

    def config_json(self) -> dict[str, Any]:
        return {"type": self._network.type, **asdict(self.config)}

    def more_config(self) -> dict[str, Any]:
        return {"static": self.branch.config_json()} if self.branch is not None else {}

    def info(self) -> dict[str, Any]:
        return {"vocab_size": len(self.vocab), "lowercase": self.vocab.lowercase}

    def weights(self) -> dict[str, np.ndarray]:
        """The network's weights by their ``model.safetensors`` names, float32 NumPy arrays."""
        return cpu_arrays(self._network)

    def hashed(self) -> hashlib._Hash:
        """The vocabulary, the config, the network's weights and the branch."""
        digest = hashlib.sha256(json.dumps([self.vocab.tokens, self.vocab.lowercase, asdict(self.config)]).encode())
        for name, array in sorted(self.weights().items()):
            digest.update(name.encode())
            digest.update(np.asarray(array, np.float32, order="C").tobytes())
        if self.branch is not None:
            self.branch.digest(digest)
        return digest

    def encode(self, questions: list[str], batch_size: int | None = None) -> np.ndarray:
        """Unit vectors ``(N, d)`` float32 for ``questions``, encoded in length-sorted batches.

        Up to :data:`FEW` questions (a search's queries) are one batch in their own order: the
        same padded batch the sorted path would make, without sorting and scattering it back. Up to
        :data:`~dupq.modeling.kernels.FEW_QUESTIONS` of them go through the NumPy forward pass
        (:mod:`dupq.modeling.kernels`) where the network has one. A static branch joins its vector
        to the network's (:meth:`~dupq.modeling.static.StaticBranch.join`).
        """
        if not isinstance(self._network, Stored) and self._network.training:
            self._network.eval()
        encoded = self.vocab.encode(questions)
        u = self._vectors(encoded, batch_size or ENCODE_BATCH)  # (N, d)
        if self.branch is None:
            return u
        return self.branch.join(u, self.branch.vectors(self.vocab, encoded, questions))  # (N, d + e)

    def _vectors(self, encoded: Encoded, batch_size: int) -> np.ndarray:
        """The network's unit vectors ``(N, d)`` of encoded questions (see :meth:`encode`)."""
        n = len(encoded)
        if 0 < n <= min(FEW, batch_size):
            ids, lengths = encoded.padded(np.arange(n))  # (B, L), (B,)
            kernel = self.kernels and self.kernels.encoder(self._network, n)
            return kernel(ids, lengths) if kernel else self._torch_encode(ids, lengths)
        order = np.argsort(encoded.lengths, kind="stable")
        out = np.empty((n, self.config.out_dim), dtype=np.float32)
        for start in range(0, len(order), batch_size):
            index = order[start : start + batch_size]
            out[index] = self._torch_encode(*encoded.padded(index))
        return out

    def _torch_encode(self, ids: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        """Unit vectors ``(B, d)`` of right-padded ids ``(B, L)`` by the torch network."""
        torch, network = import_torch(), self.network
        with torch.inference_mode():
            return network(torch.from_numpy(ids), torch.from_numpy(lengths)).float().numpy()

    def judged(self, x: np.ndarray) -> np.ndarray:
        """The network's own half of joined vectors (the pair head reads it), or the vectors themselves."""
        return x if self.branch is None else self.branch.model_half(x, self.config.out_dim)

    def save(self, folder: Path, half: bool, head: dict[str, np.ndarray]) -> str:
        """``model.safetensors`` (the network's weights and the head's), the branch's files and ``vocab.json``."""
        dtype = np.float16 if half else np.float32
        weights = {k: np.asarray(v, dtype, order="C") for k, v in (self.weights() | head).items()}
        atomic_write(folder / "model.safetensors", save(weights, metadata={"format": FORMAT}))
        if self.branch is not None:
            self.branch.save(folder, half)
        elif (folder / STATIC_WEIGHTS).exists():
            (folder / STATIC_WEIGHTS).unlink()  # a branch this model no longer has
        self.vocab.save(folder / "vocab.json")
        return np.dtype(dtype).name


def read_lstm(folder: Path, config: ModelConfig) -> tuple[LSTMEncoder, Stored | None]:
    """The LSTM encoder of ``folder`` and its stored pair head (None: none), torch-free: the vocabulary, the
    checked weights of ``model.safetensors`` (the head's under ``head.``) and the static branch."""
    vocab = Vocabulary.load(folder / "vocab.json")
    if len(vocab) != config.encoder.vocab_size:
        raise DupqError(
            f"{folder}: vocab.json has {len(vocab)} {vocab.UNIT} but the config says {config.encoder.vocab_size}."
        )
    part: dict[str, dict[str, np.ndarray]] = {"": {}, HEAD_PREFIX: {}}
    for name, array in read_weights(folder, config).items():
        prefix = HEAD_PREFIX if name.startswith(HEAD_PREFIX) else ""
        part[prefix][name.removeprefix(prefix)] = array
    head = Stored("head", config.head, part[HEAD_PREFIX]) if config.head is not None else None
    static = None if config.static is None else StaticBranch.load(folder, config.static, len(vocab))
    return LSTMEncoder(vocab, Stored(config.kind, config.encoder, part[""]), static), head
