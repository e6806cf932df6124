"""Models: an encoder (LSTM, transformer, joined) and a judge (pair head, calibration, threshold), their folder
format and the verdict rule."""

from dupq.modeling import sentence_model  # noqa: F401 - registers the sentence-transformers reader with Model.load
