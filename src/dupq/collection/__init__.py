"""A collection of questions kept for search: the :class:`~dupq.collection.collection.Collection`, the
backend interface every store implements (:mod:`dupq.collection.backend`), and the backends:
a folder kept by SQLite and FAISS (:mod:`dupq.collection.folder`) and Milvus (:mod:`dupq.collection.milvus`)."""
