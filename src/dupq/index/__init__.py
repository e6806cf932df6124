"""Vector search shared below the collections and dedup: the exact search function and the FAISS index (:mod:`dupq.index.vectors`)."""

from dupq.core.lazy import lazy_names

__all__ = ["IndexConfig", "VectorIndex", "search"]

__getattr__ = lazy_names(__name__, dict.fromkeys(__all__, "dupq.index.vectors"))  # FAISS comes in with them
