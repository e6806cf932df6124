"""dupq: find duplicate questions with a Siamese LSTM."""

from dupq.core.errors import DupqError
from dupq.modeling.model import Model

__all__ = ["DupqError", "Model"]
__version__ = "0.1.0"
