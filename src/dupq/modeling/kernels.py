"""NumPy forward passes on the CPU: the LSTM encoder for a few questions, and the pair head.

For the little arithmetic of one search (one question, ten hits) PyTorch spends most of its time dispatching small
operators and reordering the recurrent weights (oneDNN), and pushes the index's and SQLite's data out of the caches;
``dupq-lab single-search`` times both (docs/scale.md).

The torch modules stay the definition; this is a second backend for their forward pass at inference, held equal to them
by ``tests/modeling/test_kernels.py``. The kernels read weights by the modules' state-dict names, from a module or from
``model.safetensors`` (:class:`Stored`), so a model loaded to judge and search needs no torch. :class:`Kernels` prepares
the weights once and again whenever a parameter changes; it answers None where torch must run: a bidirectional encoder,
weights not float32 on the CPU, training mode, or more than :data:`FEW_QUESTIONS` questions.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from dupq.core.threads import import_torch
from dupq.modeling.architecture import EncoderConfig, HeadConfig

if TYPE_CHECKING:
    from torch import nn

_BUILDING = threading.Lock()  # two threads that need a part's torch module at once build it once
FEW_QUESTIONS = 8  # questions per call up to which the NumPy recurrence beats torch's (dupq-lab single-search)
NORM_EPS = 1e-12  # torch.nn.functional.normalize's floor on the norm
Weights = Mapping[str, np.ndarray]  # a module's float32 weights by state-dict name ("lstm.weight_hh_l0", "scale")


@dataclass(eq=False)
class Stored:
    """A module as a model folder stores it, without torch: its registered type, config and weights.

    ``type`` is the encoder's ("lstm") or ``"head"``; what the kernels read of a module
    (``type``, ``config``) has the same names on :class:`~dupq.modeling.encoders.Encoder`. Stored
    weights never change: a model that trains builds the torch module from them first.
    """

    type: str
    config: EncoderConfig | HeadConfig
    weights: dict[str, np.ndarray]  # float32, by state-dict name


def _state(module: nn.Module) -> tuple | None:
    """What identifies a module's current weights (storage and in-place version of each); None when
    they are not float32 on the CPU or the module is training."""
    import torch  # a module is given: torch is loaded already

    params = list(module.parameters())
    if module.training or any(p.device.type != "cpu" or p.dtype != torch.float32 for p in params):
        return None
    return (id(module), *((p.data_ptr(), p._version) for p in params))


def arrays(module: nn.Module) -> dict[str, np.ndarray]:
    """A CPU module's weights as NumPy arrays by state-dict name: views of its parameters, no copy."""
    return {name: tensor.detach().numpy() for name, tensor in module.state_dict().items()}


class LSTMKernel:
    """``Embedding -> LSTM -> pooling -> L2 normalise`` of a unidirectional LSTM encoder, in NumPy.

    The gates are reordered from torch's ``(i, f, g, o)`` to ``(i, f, o, g)`` and the rows of
    ``i, f, o`` halved, so one ``tanh`` over all four gives the three sigmoids as
    ``sigmoid(x) = (1 + tanh(x / 2)) / 2`` and the cell input ``g`` at once.
    """

    def __init__(self, weights: Weights, config: EncoderConfig):
        h = self.hidden = config.dim
        order = np.r_[0 : 2 * h, 3 * h : 4 * h, 2 * h : 3 * h]  # (4H,) i, f, o, g
        scale = np.r_[np.full(3 * h, 0.5), np.ones(h)].astype(np.float32)  # (4H,)
        self.embedding = np.asarray(weights["embedding.weight"], np.float32)  # (V, d) float32 already: no copy
        self.w_in = np.ascontiguousarray((weights["lstm.weight_ih_l0"][order] * scale[:, None]).T)  # (d, 4H)
        self.w_rec = np.ascontiguousarray((weights["lstm.weight_hh_l0"][order] * scale[:, None]).T)  # (H, 4H)
        bias = weights["lstm.bias_ih_l0"] + weights["lstm.bias_hh_l0"]  # (4H,)
        self.bias = (bias[order] * scale).astype(np.float32)
        self.pooling = config.pooling

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

    def __init__(self, weights: Weights, config: HeadConfig):
        self.scale, self.bias = float(weights["scale"]), float(weights["bias"])
        self.layers = None
        if config.kind == "mlp":
            self.layers = (
                np.ascontiguousarray(weights["mlp.0.weight"].T),  # (2d + 1, hidden)
                np.asarray(weights["mlp.0.bias"]),  # (hidden,)
                weights["mlp.2.weight"][0].copy(),  # (hidden,)
                float(weights["mlp.2.bias"][0]),
            )

    def from_cosines(self, cos: np.ndarray) -> np.ndarray:
        """The cosine logit ``scale * (cos - bias)`` ``(N,)``: a cosine head's whole logit."""
        return self.scale * (cos - self.bias)

    def __call__(self, u: np.ndarray, v: np.ndarray) -> np.ndarray:
        cos = np.einsum("nd,nd->n", u, v)  # (N,)
        logit = self.from_cosines(cos)
        if self.layers is not None:
            w1, b1, w2, b2 = self.layers
            features = np.concatenate([np.abs(u - v), u * v, cos[:, None]], axis=1)  # (N, 2d + 1)
            hidden = features @ w1
            hidden += b1
            np.maximum(hidden, 0, out=hidden)
            logit = logit + (hidden @ w2 + b2)
        return logit.astype(np.float64)


class Kernels:
    """A model's NumPy forward passes, prepared on first use and again whenever a module's weights change.

    Each part is given as the torch module or as :class:`Stored` weights, which never change.
    """

    def __init__(self):
        self._prepared: dict[str, tuple] = {}  # "encoder"/"head" -> (the weights' state, the kernel)

    def encoder(self, encoder: nn.Module | Stored | None, batch: int) -> LSTMKernel | None:
        """The kernel of ``encoder`` for ``batch`` questions, or None where torch should run."""
        if batch > FEW_QUESTIONS or getattr(encoder, "type", None) != "lstm" or encoder.config.bidirectional:
            return None
        return self._get("encoder", encoder, LSTMKernel)

    def head(self, head: nn.Module | Stored | None) -> HeadKernel | None:
        """The kernel of a pair head, or None where torch should run (no head, a GPU, training)."""
        return None if head is None else self._get("head", head, HeadKernel)

    def _get(self, name: str, part: nn.Module | Stored, kind: type):
        state = ("stored", id(part)) if isinstance(part, Stored) else _state(part)
        if state is None:
            return None
        kept = self._prepared.get(name)
        if kept is None or kept[0] != state:
            weights = part.weights if isinstance(part, Stored) else arrays(part)
            kept = (state, kind(weights, part.config))
            self._prepared[name] = kept  # one assignment: a search on another thread sees the old or the new
        return kept[1]


def build(part: Stored):
    """The torch module of a stored part, holding its weights (this imports torch): its stored type names
    the encoder class (:data:`dupq.modeling.encoders.ENCODERS`), or ``"head"`` the pair head."""
    torch = import_torch()
    from dupq.modeling.encoders import ENCODERS
    from dupq.modeling.heads import PairHead

    with torch.inference_mode(False):  # trainable parameters, even when first needed under inference mode
        module = PairHead(part.config) if part.type == "head" else ENCODERS[part.type](part.config)
        module.load_state_dict({k: torch.tensor(v) for k, v in part.weights.items()})
    return module.eval()


def build_once(owner: object, name: str):
    """The torch module that ``owner``'s attribute ``name`` holds, built from its :class:`Stored` weights the first
    time and kept there (once, whichever thread asks first: this imports torch)."""
    if isinstance(getattr(owner, name), Stored):
        with _BUILDING:
            if isinstance(getattr(owner, name), Stored):
                setattr(owner, name, build(getattr(owner, name)))
    return getattr(owner, name)


def cpu_arrays(part: nn.Module | Stored) -> dict[str, np.ndarray]:
    """A part's weights as float32 NumPy arrays: the stored ones, or a torch module's (copied from a GPU, or
    from float16)."""
    if isinstance(part, Stored):
        return part.weights
    import torch  # a module is given: torch is loaded already

    if any(p.device.type != "cpu" or p.dtype != torch.float32 for p in part.state_dict().values()):
        return {k: v.detach().float().cpu().numpy() for k, v in part.state_dict().items()}
    return arrays(part)
