"""The one place tests reach into a collection's private state, to hold or break what no public call exposes.

Tests read a collection through its public face (``index_stats()``, ``cache_error``); these helpers are
for injecting faults and driving the folder cache by hand, and name what they reach for.
"""

from __future__ import annotations


def folder_cache(collection):
    """The FAISS cache of a folder collection (:class:`dupq.collection.folder.cache.FaissCache`): save it, swap its index."""
    return collection._backend.cache


def folder_store(collection):
    """The SQLite store of a folder collection (:class:`dupq.collection.folder.store.SQLiteStore`)."""
    return collection._backend.store


def writer_connection(collection):
    """The SQLite connection a folder collection writes through, for a test that makes a write fail."""
    return collection._backend.store._db


def postgres_connections(collection):
    """The connection pool of a Postgres collection, whose address a test points elsewhere to lose the server."""
    return collection._backend.connections
