"""Vector search shared below the collections and dedup: the exact search function and the FAISS index (:mod:`dupq.index.vectors`)."""
