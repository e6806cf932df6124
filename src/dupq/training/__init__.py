"""Training: a model from labelled pairs (:mod:`dupq.training.train`), fitted to a help desk's own questions
(:mod:`dupq.training.adapt`, whose :func:`~dupq.training.adapt.adapt` is ``dupq.adapt``), and the teacher's
distillation (:mod:`dupq.training.distil`). The configs are cheap to import; the rest imports torch."""

from dupq.training.config import AdaptConfig, TrainConfig

__all__ = ["AdaptConfig", "TrainConfig"]
