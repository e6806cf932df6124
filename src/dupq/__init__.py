"""dupq: find duplicate questions with a Siamese LSTM.

The library's face, in the order a user meets it (docs/python.md shows each in use)::

    from dupq import Model, Collection, dedup, adapt

:class:`Model` judges pairs and encodes questions; :class:`Collection` stores questions and searches them
(each :class:`Hit` a stored question with the model's verdict); :func:`dedup` groups questions into duplicates;
:func:`adapt` fits a model to your own questions. Every mistake a user can fix is a :class:`DupqError` (a
collection's :class:`KeyConflict`, :class:`UnknownKey` and :class:`StoreFailure` among them).

``import dupq`` stays cheap: the names whose modules import FAISS or torch are imported when first used (PEP 562).
"""

# The package dupq.dedup is imported before its function takes the name: importing a module of the package
# later then leaves ``dupq.dedup`` the function (``from dupq.dedup.run import ...`` still finds the modules).
from dupq.core.errors import DupqError
from dupq.core.lazy import lazy_names
from dupq.dedup import dedup
from dupq.modeling.model import Model

__all__ = [
    "Collection",
    "DupqError",
    "Hit",
    "IndexStats",
    "KeyConflict",
    "Model",
    "StoreFailure",
    "UnknownKey",
    "adapt",
    "dedup",
]
__version__ = "0.1.0"

__getattr__ = lazy_names(
    __name__,
    {
        **dict.fromkeys(
            ["Collection", "Hit", "IndexStats", "KeyConflict", "StoreFailure", "UnknownKey"], "dupq.collection"
        ),
        "adapt": "dupq.training.adapt",  # torch comes in with it
    },
)
