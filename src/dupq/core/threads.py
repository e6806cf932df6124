"""torch's CPU thread count, chosen by a command before it knows whether it needs torch at all.

Judging a pair or searching with an LSTM model runs on the NumPy kernels and never imports torch
(:mod:`dupq.modeling.kernels`); encoding many questions at once, training or a transformer does.
So ``--threads`` is kept here: :func:`use_threads` sets it at once where torch is loaded already,
else :func:`import_torch`, the import through which a loaded model reaches torch later, sets it then.
"""

from __future__ import annotations

import sys

_pending = 0  # threads asked for before torch was imported (0: none, or applied already)


def use_threads(threads: int) -> None:
    """torch's intra-op threads: ``threads`` (0 leaves torch's default), now or when torch is imported."""
    global _pending
    torch = sys.modules.get("torch")
    if threads and torch is not None:
        torch.set_num_threads(threads)
    else:
        _pending = threads


def import_torch():
    """The ``torch`` module, with the threads a command asked for (:func:`use_threads`) set on first import."""
    global _pending
    import torch

    if _pending:
        torch.set_num_threads(_pending)
        _pending = 0
    return torch
