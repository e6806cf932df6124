"""Names a package hands on without importing them until asked (PEP 562), so that ``import dupq`` stays cheap.

A package's ``__init__`` lists its face in ``__all__``; the names whose modules import FAISS or torch are
looked up here on first use:

>>> __getattr__ = lazy_names(__name__, {"Collection": "dupq.collection.collection"})  # doctest: +SKIP
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def lazy_names(package: str, homes: dict[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__``: each name of ``homes`` imported from its module (``{name: module}``) when first asked for."""

    def __getattr__(name: str) -> Any:
        if name not in homes:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(homes[name]), name)

    return __getattr__
