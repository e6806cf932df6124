"""Models: encoders, pair heads, the model and its folder format, calibration, the verdict rule."""

from dupq.modeling import sentence_model  # noqa: F401 - registers the sentence-transformers reader with Model.load
