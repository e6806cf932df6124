"""What every layer shares: the one-sentence error, atomic files, options and threads."""

from dupq.core.errors import DupqError

__all__ = ["DupqError"]
