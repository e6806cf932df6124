"""Question encoders: token ids ``(B, L)`` to unit vectors ``(B, d)``, registered by name.

``config.json`` names a model's encoder, as sentence-transformers' ``modules.json`` names each module: ``"encoder":
{"type": "lstm", "vocab_size": ..., "dim": ...}``; the type is a key of :data:`ENCODERS` (a config without one is the
LSTM). Another encoder plugs in by adding a class here and its gate count to :data:`dupq.modeling.architecture.GATES`
(which names the types without torch). ``"sentence-transformers"`` is no type of this registry: a whole pretrained model
with its own tokenizer (:mod:`dupq.modeling.sentence_model`).

The seed's encoder is ``Embedding(V, d) -> LSTM(d) -> mean -> L2 normalise``; unlike its ``GlobalAveragePooling1D``,
:func:`pool` skips padding, so a question's vector does not depend on how long the other questions of its batch are.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from dupq.modeling.architecture import (  # noqa: F401 - the configs and names, re-exported beside the modules
    POOLINGS,
    SENTENCE_TRANSFORMERS,
    EncoderConfig,
    SentenceConfig,
)


def pool(states: Tensor, lengths: Tensor, pooling: str) -> Tensor:
    """One vector ``(B, H)`` per question from its token states ``(B, L, H)``, over the real tokens only.

    ``"mean"`` averages them (the seed, without its padding); ``"max"`` takes each feature's
    largest value (InferSent, Conneau et al. 2017).
    """
    real = torch.arange(states.shape[1], device=states.device)[None, :] < lengths[:, None]  # (B, L)
    if pooling == "max":
        return states.masked_fill(~real[..., None], float("-inf")).max(dim=1).values  # (B, H)
    return (states * real[..., None]).sum(1) / lengths[:, None].to(states.dtype)  # (B, H)


class Encoder(nn.Module):
    """``Embedding -> LSTM -> pooling -> L2 normalise``: ids ``(B, L)`` to unit vectors ``(B, d)``.

    A subclass swaps the recurrent layer by setting ``type`` (its registry name, also the name of
    the layer's weights in ``model.safetensors``) and ``layer`` (a ``torch.nn.RNNBase``).
    """

    type = "lstm"
    layer: type[nn.RNNBase] = nn.LSTM

    def __init__(self, config: EncoderConfig):
        super().__init__()
        self.config = config
        self.embedding = nn.Embedding(config.vocab_size, config.dim, padding_idx=0)
        nn.init.uniform_(self.embedding.weight, -0.05, 0.05)  # Keras' Embedding initialiser, as in the seed
        with torch.no_grad():
            self.embedding.weight[0].zero_()
        self.dropout = nn.Dropout(config.dropout)
        self.add_module(
            self.type, self.layer(config.dim, config.dim, batch_first=True, bidirectional=config.bidirectional)
        )

    def forward(self, ids: Tensor, lengths: Tensor) -> Tensor:
        return self.read(self.embedding(ids), lengths)

    def read(self, x: Tensor, lengths: Tensor) -> Tensor:
        """Unit vectors ``(B, d)`` from word vectors ``(B, L, d)``: dropout, :meth:`pooled`, L2 normalisation."""
        return F.normalize(self.pooled(self.dropout(x), lengths), dim=-1)

    def pooled(self, x: Tensor, lengths: Tensor) -> Tensor:
        """One vector ``(B, H)`` per question, not yet normalised, from word vectors ``(B, L, d)``: the
        recurrent layer, then :func:`pool` over the real tokens."""
        recurrent = getattr(self, self.type)
        if self.config.bidirectional:
            # The backward direction must start at each question's last real token, not in its padding.
            packed = nn.utils.rnn.pack_padded_sequence(x, lengths.cpu(), batch_first=True, enforce_sorted=False)
            out, _ = recurrent(packed)
            out, _ = nn.utils.rnn.pad_packed_sequence(out, batch_first=True, total_length=x.shape[1])
        else:
            out, _ = recurrent(x)  # (B, L, H): padding sits after the real tokens and cannot affect them
        return pool(out, lengths, self.config.pooling)


ENCODERS: dict[str, type[Encoder]] = {cls.type: cls for cls in (Encoder,)}
