"""The Siamese encoder and the user-facing :class:`Model` (vocabulary + encoder + threshold).

One encoder with shared weights reads both questions of a pair (seed 000, 002):

    ids (B, L) -> Embedding(V, d) -> LSTM(d) -> mean over the real tokens -> L2 normalise -> (B, d)

Unlike the seed's ``GlobalAveragePooling1D``, the mean skips padding, so a question's vector
does not depend on how long the other questions of its batch are. Two questions are compared by
the dot product of their vectors, which is their cosine similarity.

A trained model is a folder: ``config.json`` (architecture, threshold), ``vocab.json``,
``model.safetensors`` (weights) and ``metrics.json`` (how it was trained and what it scored).
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from safetensors import SafetensorError
from safetensors.torch import load_file, save
from torch import Tensor, nn

from dupq.files import DupqError, atomic_write, check_path, read_json, write_json
from dupq.schema import check_metrics, check_model_config
from dupq.tokenizer import Encoded, Vocabulary, check_questions

FORMAT = "dupq-model/1"
SEED_THRESHOLD = 0.7  # the seeds' fixed decision threshold, used until one is calibrated
BUNDLED = Path(__file__).parent / "bundled" / "model"


@dataclass
class EncoderConfig:
    """Architecture of the shared question encoder."""

    vocab_size: int  # rows of the embedding table: the vocabulary's size
    dim: int = 128  # embedding and LSTM width (the seed's d_feature); cost grows with dim^2
    bidirectional: bool = False  # also read right to left; output is 2*dim wide, slower by ~2x
    dropout: float = 0.0  # dropout on word embeddings while training; regularises, slows convergence

    @property
    def out_dim(self) -> int:
        return self.dim * (2 if self.bidirectional else 1)


class Encoder(nn.Module):
    """``Embedding -> LSTM -> masked mean -> L2 normalise``: ids ``(B, L)`` to unit vectors ``(B, d)``."""

    def __init__(self, config: EncoderConfig):
        super().__init__()
        self.config = config
        self.embedding = nn.Embedding(config.vocab_size, config.dim, padding_idx=0)
        nn.init.uniform_(self.embedding.weight, -0.05, 0.05)  # Keras' Embedding initialiser, as in the seed
        with torch.no_grad():
            self.embedding.weight[0].zero_()
        self.dropout = nn.Dropout(config.dropout)
        self.lstm = nn.LSTM(config.dim, config.dim, batch_first=True, bidirectional=config.bidirectional)

    def forward(self, ids: Tensor, lengths: Tensor) -> Tensor:
        x = self.dropout(self.embedding(ids))  # (B, L, d)
        if self.config.bidirectional:
            # The backward direction must start at each question's last real token, not in its padding.
            packed = nn.utils.rnn.pack_padded_sequence(x, lengths.cpu(), batch_first=True, enforce_sorted=False)
            out, _ = self.lstm(packed)
            out, _ = nn.utils.rnn.pad_packed_sequence(out, batch_first=True, total_length=ids.shape[1])
        else:
            out, _ = self.lstm(x)  # (B, L, H): padding sits after the real tokens and cannot affect them
        real = torch.arange(ids.shape[1], device=ids.device)[None, :] < lengths[:, None]  # (B, L)
        mean = (out * real[..., None]).sum(1) / lengths[:, None].to(out.dtype)  # (B, H)
        return F.normalize(mean, dim=-1)


def pad_pair(enc1: Encoded, enc2: Encoded, index: np.ndarray) -> tuple[Tensor, Tensor]:
    """Rows ``index`` of two encoded sides stacked as one ``(2B, L)`` batch and its ``(2B,)`` lengths."""
    ids1, len1 = enc1.padded(index)
    ids2, len2 = enc2.padded(index)
    width = max(ids1.shape[1], ids2.shape[1])
    ids = np.zeros((2 * len(index), width), dtype=np.int64)  # (2B, L)
    ids[: len(index), : ids1.shape[1]] = ids1
    ids[len(index) :, : ids2.shape[1]] = ids2
    return torch.from_numpy(ids), torch.from_numpy(np.concatenate([len1, len2]))


class Model:
    """A duplicate-question detector: vocabulary, encoder and decision threshold.

    >>> model = Model.load("runs/seed")                                           # doctest: +SKIP
    >>> model.similarity("When will I see you?", "When can I see you again?")    # doctest: +SKIP
    0.84
    """

    def __init__(
        self,
        vocab: Vocabulary,
        encoder: Encoder,
        threshold: float = SEED_THRESHOLD,
        threshold_info: dict[str, Any] | None = None,
        metrics: dict[str, Any] | None = None,
    ):
        self.vocab = vocab
        self.encoder = encoder.eval()
        self.threshold = threshold
        self.threshold_info = threshold_info or {"chosen_on": "the seeds' fixed value"}
        self.metrics = metrics or {}
        self.folder: Path | None = None  # the folder it was loaded from (a collection records it)

    @classmethod
    def create(cls, vocab: Vocabulary, dim: int = 128, bidirectional: bool = False, dropout: float = 0.0) -> Model:
        config = EncoderConfig(vocab_size=len(vocab), dim=dim, bidirectional=bidirectional, dropout=dropout)
        return cls(vocab, Encoder(config))

    @property
    def config(self) -> EncoderConfig:
        return self.encoder.config

    def fingerprint(self) -> str:
        """A short hash of the weights and vocabulary: equal fingerprints encode questions alike."""
        digest = hashlib.sha256(json.dumps([self.vocab.tokens, self.vocab.lowercase, asdict(self.config)]).encode())
        for name, tensor in sorted(self.encoder.state_dict().items()):
            digest.update(name.encode())
            digest.update(tensor.detach().float().contiguous().numpy().tobytes())
        return digest.hexdigest()[:16]

    @torch.inference_mode()
    def encode(self, questions: list[str], batch_size: int = 1024) -> np.ndarray:
        """Unit vectors ``(N, d)`` float32 for ``questions``, encoded in length-sorted batches."""
        self.encoder.eval()
        encoded = self.vocab.encode(questions)
        order = np.argsort(encoded.lengths, kind="stable")
        out = np.empty((len(questions), self.config.out_dim), dtype=np.float32)
        for start in range(0, len(order), batch_size):
            index = order[start : start + batch_size]
            ids, lengths = encoded.padded(index)
            out[index] = self.encoder(torch.from_numpy(ids), torch.from_numpy(lengths)).float().numpy()
        return out

    def similarity(self, q1: str | list[str], q2: str | list[str]) -> float | np.ndarray:
        """Cosine similarity of two questions (a float), or of two equal-length lists (an array)."""
        single = isinstance(q1, str) and isinstance(q2, str)
        a, b = ([q1], [q2]) if single else (list(q1), list(q2))
        if single:  # a pair from a user gets the rule of every entry point; lists are bulk scoring, as in evaluate
            check_questions(a + b)
        if len(a) != len(b):
            raise DupqError(f"similarity needs lists of equal length, got {len(a)} and {len(b)}.")
        v = self.encode(a + b)
        sims = np.einsum("nd,nd->n", v[: len(a)], v[len(a) :])  # (N,)
        return float(sims[0]) if single else sims

    def is_duplicate(self, q1: str, q2: str, threshold: float | None = None) -> bool:
        """True when the similarity is above the threshold (the model's own unless one is given)."""
        return self.similarity(q1, q2) > (self.threshold if threshold is None else threshold)

    # Persistence: a folder of JSON and safetensors, each file written atomically.

    def save(self, folder: str | os.PathLike, half: bool = False) -> None:
        """Write the model folder; ``half`` stores the weights as float16 (half the size)."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        dtype = torch.float16 if half else torch.float32
        weights = {k: v.detach().to(dtype).contiguous() for k, v in self.encoder.state_dict().items()}
        atomic_write(folder / "model.safetensors", save(weights, metadata={"format": FORMAT}))
        self.vocab.save(folder / "vocab.json")
        write_json(folder / "metrics.json", self.metrics)
        write_json(
            folder / "config.json",
            {
                "format": FORMAT,
                "encoder": asdict(self.config),
                "threshold": self.threshold,
                "threshold_info": self.threshold_info,
                "weights_dtype": str(dtype).removeprefix("torch."),
            },
        )

    @classmethod
    def load(cls, folder: str | os.PathLike | None = None) -> Model:
        """Load a model folder; with no folder, the model bundled with the package."""
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
        config = read_json(folder / "config.json", f"the model config of {folder}")
        if not isinstance(config, dict) or config.get("format") != FORMAT:
            raise DupqError(f"{folder / 'config.json'} is not a dupq model config (format {FORMAT!r} expected).")
        check_model_config(config, folder / "config.json")
        try:
            known = {f.name for f in fields(EncoderConfig)}
            encoder_config = EncoderConfig(**{k: v for k, v in config["encoder"].items() if k in known})
            threshold = float(config.get("threshold", SEED_THRESHOLD))
        except (KeyError, TypeError, ValueError) as e:
            raise DupqError(f"{folder / 'config.json'} is corrupt ({type(e).__name__}: {e}).") from None
        vocab = Vocabulary.load(folder / "vocab.json")
        if len(vocab) != encoder_config.vocab_size:
            raise DupqError(f"{folder}: vocab.json has {len(vocab)} words but the config says {encoder_config.vocab_size}.")
        weights_path = folder / "model.safetensors"
        if not weights_path.is_file():
            raise DupqError(f"the weights of {folder} are missing: {weights_path} does not exist.")
        try:
            weights = load_file(weights_path)
        except (SafetensorError, OSError, ValueError) as e:
            raise DupqError(f"{weights_path} is corrupt ({e}).") from None
        encoder = Encoder(encoder_config)
        try:
            encoder.load_state_dict({k: v.float() for k, v in weights.items()})
        except RuntimeError as e:
            first = str(e).strip().splitlines()[0]
            raise DupqError(f"{weights_path} does not match {folder / 'config.json'} ({first}).") from None
        metrics_path = folder / "metrics.json"
        metrics = check_metrics(read_json(metrics_path, f"the metrics of {folder}"), metrics_path) if metrics_path.exists() else {}
        model = cls(vocab, encoder, threshold, config.get("threshold_info"), metrics)
        model.folder = folder.resolve()
        return model
