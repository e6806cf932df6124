"""dupq: find duplicate questions with a Siamese LSTM."""

from dupq.files import DupqError
from dupq.model import Model

__all__ = ["DupqError", "Model"]
__version__ = "0.1.0"
