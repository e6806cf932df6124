"""Models: an encoder (LSTM, transformer, joined) and a judge (pair head, calibration, threshold), their folder
format and the verdict rule."""

from dupq.modeling import sentence_model  # noqa: F401 - registers the sentence-transformers reader with Model.load
from dupq.modeling.encoding import TextEncoder
from dupq.modeling.judge import Judge
from dupq.modeling.model import Model
from dupq.modeling.verdict import Verdicts

__all__ = ["Judge", "Model", "TextEncoder", "Verdicts"]
