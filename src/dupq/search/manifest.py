"""What a collection's ``manifest.json`` must hold: one check, one sentence per mistake."""

from __future__ import annotations

from typing import Any

from dupq.core.files import DupqError
from dupq.modeling.schema import FilePath, _choice, _fail, _int, _object
from dupq.search.vectors import IndexConfig  # its ranges are checked where an IndexConfig is made


def check_manifest(manifest: Any, path: FilePath, fmt: str) -> dict:
    """A collection's ``manifest.json``: its format, the model that built it, dimension, index settings, cache."""
    manifest = _object(manifest, path, "the file")
    if manifest.get("format") != fmt:
        raise DupqError(
            f"{path} is not a dupq collection manifest (format {fmt!r} expected, found {manifest.get('format')!r})."
        )
    model = _object(manifest.get("model"), path, "model")
    if not isinstance(model.get("fingerprint"), str):
        _fail(path, "model.fingerprint", "a string", model.get("fingerprint"))
    if model.get("path") is not None and not isinstance(model["path"], str):
        _fail(path, "model.path", "a folder name or null", model["path"])
    _choice(model, "bundled", path, "model.", (False, True), optional=True)
    _int(manifest, "dim", path, "", 1, 131072)
    _int(manifest, "count", path, "", 0, 2**62, optional=True)
    _int(manifest, "trained_on", path, "", 1, 2**62, optional=True)
    if manifest.get("checksum") is not None and not isinstance(manifest["checksum"], str):
        _fail(path, "checksum", "a string", manifest["checksum"])
    index = _object(manifest.get("index"), path, "index")
    for key in ("hnsw_m", "ef_construction", "ef_search"):
        _int(index, key, path, "index.", -(2**31), 2**31, optional=True)  # types here, ranges in IndexConfig
    try:
        IndexConfig(**index)
    except TypeError as e:
        raise DupqError(f"{path} is corrupt: index holds an unknown setting ({e}).") from None
    except DupqError as e:
        raise DupqError(f"{path} is corrupt: {e}") from None
    return manifest
