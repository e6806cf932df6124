"""A collection of questions kept for search: the :class:`~dupq.collection.collection.Collection`, the
backend interface every store implements (:mod:`dupq.collection.backend`), and the backends:
a folder kept by SQLite and FAISS (:mod:`dupq.collection.folder`), Milvus (:mod:`dupq.collection.milvus`) and
PostgreSQL with pgvector (:mod:`dupq.collection.postgres`).

The package hands on what a user holds, catches or receives; the collection's module imports FAISS, so its
names are imported when first used.
"""

from dupq.core.lazy import lazy_names

__all__ = ["Collection", "Hit", "IndexStats", "KeyConflict", "Location", "StoreFailure", "UnknownKey"]

__getattr__ = lazy_names(
    __name__,
    {
        "Collection": "dupq.collection.collection",
        "Hit": "dupq.collection.collection",
        "IndexStats": "dupq.collection.backend",
        "KeyConflict": "dupq.collection.rows",
        "Location": "dupq.collection.location",
        "StoreFailure": "dupq.collection.rows",
        "UnknownKey": "dupq.collection.rows",
    },
)
