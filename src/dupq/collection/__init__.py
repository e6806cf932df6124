"""A collection of questions kept for search: the :class:`~dupq.collection.collection.Collection`, the
backend interface every store implements (:mod:`dupq.collection.backend`), and the backends:
a folder kept by SQLite and FAISS (:mod:`dupq.collection.folder`), Milvus (:mod:`dupq.collection.milvus`) and
PostgreSQL with pgvector (:mod:`dupq.collection.postgres`)."""
