"""The one error a user sees: :class:`DupqError`, a mistake they can fix, said in one sentence.

Every layer raises it; the CLI prints its message and exits with status 2, the service answers it
as a 4xx. Anything else that escapes is dupq's own failure.
"""

from __future__ import annotations


class DupqError(Exception):
    """A mistake the user can fix (bad path, column, file or argument): one sentence naming what is wrong and where."""
