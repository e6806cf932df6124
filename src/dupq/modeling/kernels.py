"""NumPy forward passes on the CPU: the LSTM encoder for a few questions, and the pair head.

A search encodes one question and judges its ten hits. For that little arithmetic PyTorch spends
most of its time elsewhere: dispatching a dozen small operators, and for the LSTM, oneDNN
reordering the recurrent weights on every call (``ONEDNN_VERBOSE=1`` lists two reorders around
each recurrence). Within a search, that work also pushes the index's and SQLite's data out of the
CPU's caches, so the rest of the search pays for it again. ``bench/single_search.py`` times whole
searches with these kernels and with torch in one run (figures in docs/scale.md).

The torch modules stay the definition (:class:`~dupq.modeling.encoders.Encoder`,
:class:`~dupq.modeling.heads.PairHead`); this module is a second backend for their forward pass at
inference, like an exported runtime, and ``tests/test_kernels.py`` holds the two equal on random
weights and on the bundled model. :class:`Kernels` prepares the weights once and prepares them
again whenever a parameter changes (training, ``load_state_dict``). It answers None where torch
must run: a GRU or bidirectional encoder, weights not float32 on the CPU, a module in training
mode, or more than :data:`FEW_QUESTIONS` questions to encode, where one batched torch call is faster.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from dupq.modeling.encoders import Encoder
from dupq.modeling.heads import PairHead

FEW_QUESTIONS = 8  # questions per call up to which the NumPy recurrence beats torch's (bench/single_search.py)
NORM_EPS = 1e-12  # torch.nn.functional.normalize's floor on the norm


def _state(module: nn.Module) -> tuple | None:
    """What identifies a module's current weights (storage and in-place version of each); None when
    they are not float32 on the CPU or the module is training."""
    params = list(module.parameters())
    if module.training or any(p.device.type != "cpu" or p.dtype != torch.float32 for p in params):
        return None
    return (id(module), *((p.data_ptr(), p._version) for p in params))


def _array(t: torch.Tensor) -> np.ndarray:
    return t.detach().numpy()


class LSTMKernel:
    """``Embedding -> LSTM -> pooling -> L2 normalise`` of a unidirectional LSTM encoder, in NumPy.

    The gates are reordered from torch's ``(i, f, g, o)`` to ``(i, f, o, g)`` and the rows of
    ``i, f, o`` halved, so one ``tanh`` over all four gives the three sigmoids as
    ``sigmoid(x) = (1 + tanh(x / 2)) / 2`` and the cell input ``g`` at once.
    """

    def __init__(self, encoder: Encoder):
        lstm: nn.LSTM = encoder.lstm
        h = self.hidden = lstm.hidden_size
        order = np.r_[0 : 2 * h, 3 * h : 4 * h, 2 * h : 3 * h]  # (4H,) i, f, o, g
        scale = np.r_[np.full(3 * h, 0.5), np.ones(h)].astype(np.float32)  # (4H,)
        self.embedding = _array(encoder.embedding.weight)  # (V, d) a view: no copy of the table
        self.w_in = np.ascontiguousarray((_array(lstm.weight_ih_l0)[order] * scale[:, None]).T)  # (d, 4H)
        self.w_rec = np.ascontiguousarray((_array(lstm.weight_hh_l0)[order] * scale[:, None]).T)  # (H, 4H)
        self.bias = (_array(lstm.bias_ih_l0 + lstm.bias_hh_l0)[order] * scale).astype(np.float32)  # (4H,)
        self.pooling = encoder.config.pooling

    def __call__(self, ids: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        """Unit vectors ``(B, H)`` of right-padded ids ``(B, L)`` with ``lengths`` ``(B,)`` (each >= 1)."""
        b, steps = ids.shape
        h = self.hidden
        x = self.embedding[ids.T.reshape(-1)] @ self.w_in  # (L*B, 4H) the input's share of every gate
        x = x.reshape(steps, b, 4 * h)
        x += self.bias
        states = np.empty((steps, b, h), np.float32)  # (L, B, H)
        state, cell = np.zeros((b, h), np.float32), np.zeros((b, h), np.float32)
        gates, update = np.empty((b, 4 * h), np.float32), np.empty((b, h), np.float32)
        for t in range(steps):
            np.matmul(state, self.w_rec, out=gates)
            gates += x[t]
            np.tanh(gates, out=gates)
            sig = gates[:, : 3 * h]  # i, f, o: (1 + tanh) / 2
            sig *= 0.5
            sig += 0.5
            cell *= gates[:, h : 2 * h]  # f * c
            np.multiply(gates[:, :h], gates[:, 3 * h :], out=update)  # i * g
            cell += update
            state = states[t]
            np.tanh(cell, out=state)
            state *= gates[:, 2 * h : 3 * h]  # o * tanh(c)
        # Padding comes after each question's real tokens, so it never reaches their states.
        real = np.arange(steps)[:, None] < lengths[None, :]  # (L, B)
        if self.pooling == "max":
            pooled = np.where(real[..., None], states, -np.inf).max(0)  # (B, H)
        elif real.all():
            pooled = states.mean(0)
        else:
            pooled = np.einsum("lbh,lb->bh", states, real.astype(np.float32)) / lengths[:, None].astype(np.float32)
        pooled /= np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), NORM_EPS)
        return pooled


class HeadKernel:
    """A :class:`~dupq.modeling.heads.PairHead`'s logit ``(N,)`` in NumPy: ``scale * (cos - bias)``, plus the
    mlp over ``[|u - v|, u * v, cos]`` for an mlp head."""

    def __init__(self, head: PairHead):
        self.scale, self.bias = float(head.scale.detach()), float(head.bias.detach())
        self.layers = None
        if head.config.kind == "mlp":
            first, last = head.mlp[0], head.mlp[2]
            self.layers = (
                np.ascontiguousarray(_array(first.weight).T),  # (2d + 1, hidden)
                _array(first.bias),  # (hidden,)
                _array(last.weight)[0].copy(),  # (hidden,)
                float(last.bias.detach()),
            )

    def __call__(self, u: np.ndarray, v: np.ndarray) -> np.ndarray:
        cos = np.einsum("nd,nd->n", u, v)  # (N,)
        logit = self.scale * (cos - self.bias)
        if self.layers is not None:
            w1, b1, w2, b2 = self.layers
            features = np.concatenate([np.abs(u - v), u * v, cos[:, None]], axis=1)  # (N, 2d + 1)
            hidden = features @ w1
            hidden += b1
            np.maximum(hidden, 0, out=hidden)
            logit = logit + (hidden @ w2 + b2)
        return logit.astype(np.float64)


class Kernels:
    """A model's NumPy forward passes, prepared on first use and again whenever the weights change."""

    def __init__(self):
        self._prepared: dict[str, tuple] = {}  # "encoder"/"head" -> (the weights' state, the kernel)

    def encoder(self, encoder: nn.Module | None, batch: int) -> LSTMKernel | None:
        """The kernel of ``encoder`` for ``batch`` questions, or None where torch should run."""
        if batch > FEW_QUESTIONS or type(encoder) is not Encoder or encoder.config.bidirectional:
            return None
        return self._get("encoder", encoder, LSTMKernel)

    def head(self, head: PairHead | None) -> HeadKernel | None:
        """The kernel of a pair head, or None where torch should run (no head, a GPU, training)."""
        return None if head is None else self._get("head", head, HeadKernel)

    def _get(self, name: str, module: nn.Module, kind: type):
        state = _state(module)
        if state is None:
            return None
        kept = self._prepared.get(name)
        if kept is None or kept[0] != state:
            kept = (state, kind(module))
            self._prepared[name] = kept  # one assignment: a search on another thread sees the old or the new
        return kept[1]
