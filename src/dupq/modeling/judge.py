"""The judge: how two question vectors become a pair's logit, its probability and its verdict's threshold.

A model is an encoder and a judge. The judge holds what ``config.json`` records of judging: the pair head
(:mod:`dupq.modeling.heads`; None: the cosine is the logit), the beta calibration (:mod:`dupq.modeling.probability`),
the threshold and the score it applies to, and the search calibration with its tiers
(:mod:`dupq.evaluation.search_calibration`); :mod:`dupq.modeling.verdict` reads them. The head is read as NumPy arrays
and judged by the NumPy kernel; the torch module is built only when something needs it.

>>> judge = Judge(calibration=None, threshold=0.7)
>>> judge.logits(np.array([[1.0, 0.0]], np.float32), np.array([[0.6, 0.8]], np.float32)).tolist()
[0.6000000238418579]
"""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING, Any

import numpy as np

from dupq.core.threads import import_torch
from dupq.modeling.architecture import HeadConfig
from dupq.modeling.kernels import Kernels, Stored, build_once, cpu_arrays

SIMILARITY, PROBABILITY = "similarity", "probability"  # the values of threshold_on
SEED_THRESHOLD = 0.7  # the seeds' fixed decision threshold on the cosine, used until one is chosen on dev pairs
PROBABILITY_THRESHOLD = 0.5  # a probability's threshold until one is chosen on dev pairs

if TYPE_CHECKING:
    from dupq.modeling.heads import PairHead

HEAD_PREFIX = "head."  # the head's weights in model.safetensors, beside the encoder's


class Judge:
    """Pair head, calibration, threshold and the score it applies to (``threshold_on``).

    ``threshold`` applies to the cosine when ``threshold_on`` is ``"similarity"`` (the seed's rule
    ``d > threshold``), to the calibrated probability when it is ``"probability"``.
    """

    def __init__(
        self,
        head: PairHead | Stored | None = None,
        calibration: dict[str, float] | None = None,
        threshold: float = SEED_THRESHOLD,
        threshold_on: str = SIMILARITY,
        threshold_info: dict[str, Any] | None = None,
        search_calibration: dict[str, Any] | None = None,
    ):
        self._head = head.eval() if head is not None and not isinstance(head, Stored) else head
        self.calibration = calibration  # {"method": "beta", "a", "b", "c"}, fitted on dev pairs
        self.threshold = threshold
        self.threshold_on = threshold_on  # "similarity" or "probability": what the threshold is compared with
        self.threshold_info = threshold_info or {"chosen_on": "the seeds' fixed value"}
        # {"a", "b", "c", "cosine", "margin", "margin_range", "suggest", "duplicate", "fitted_on", "fitted_by"}:
        # how search hits are judged (None: by the calibration and threshold above, one tier)
        self.search_calibration = search_calibration
        self.kernels: Kernels | None = Kernels()  # the head's NumPy forward pass (None: torch for every one)

    @property
    def head(self) -> PairHead | None:
        """The torch pair head, or None (built from the loaded weights on first use: this imports torch)."""
        return build_once(self, "_head")

    @property
    def head_config(self) -> HeadConfig | None:
        """The pair head's config (None: the cosine judges pairs), without building the head."""
        return None if self._head is None else self._head.config

    @property
    def has_probability(self) -> bool:
        """Whether it gives ``P(duplicate)``: it has a calibration or a pair head."""
        return self.calibration is not None or self._head is not None

    def weights(self) -> dict[str, np.ndarray]:
        """The head's weights under their ``model.safetensors`` names (``head.`` first), float32 NumPy arrays."""
        if self._head is None:
            return {}
        return {HEAD_PREFIX + name: array for name, array in cpu_arrays(self._head).items()}

    def logits(self, u: np.ndarray, v: np.ndarray) -> np.ndarray:
        """The uncalibrated pair logit ``(N,)`` of the vectors the head reads ``(N, d)``: the head's, or the cosine."""
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
        """The pair logit ``(N,)`` from the cosines alone, for a head that does not read the vectors
        (:func:`dupq.modeling.verdict.needs_vectors`): the cosine, or a cosine head's ``scale * (cos - bias)``."""
        cos = np.asarray(cosines, dtype=np.float64)
        if self._head is None:
            return cos
        kernel = self.kernels and self.kernels.head(self._head)
        if kernel:
            return kernel.from_cosines(cos)
        return self.head.scale.item() * (cos - self.head.bias.item())

    def config_json(self) -> dict[str, Any]:
        """What ``config.json`` records of judging, in its order: head, calibration, threshold and its score."""
        return {
            "head": asdict(self.head_config) if self.head_config is not None else None,
            "calibration": self.calibration,
            "threshold": self.threshold,
            "threshold_on": self.threshold_on,
            "threshold_info": self.threshold_info,
        } | ({"search_calibration": self.search_calibration} if self.search_calibration is not None else {})
