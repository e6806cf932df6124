"""A collection's ``manifest.json``: its pydantic format, read through :func:`dupq.core.formats.check_format`.

The manifest records the collection's format, the model that built it (fingerprint and folder),
the vectors' width, the FAISS index settings and the cache file it describes (count, checksum).
A folder collection keeps it as ``manifest.json``, a Milvus collection as a property; both are
checked here when opened, so a mistake is one sentence naming the place and the field.
:func:`new_manifest` writes a new collection's; :func:`model_for` picks the model that reads one.
"""

from __future__ import annotations

from dataclasses import asdict
from datetime import UTC, datetime
from typing import Annotated, Any

from pydantic import BaseModel, StrictBool, StrictStr, field_validator

from dupq.core.errors import DupqError
from dupq.core.formats import MAX_COUNT, MAX_OUT_DIM, FilePath, check_format, corrupt, integer, wanted
from dupq.index.vectors import IndexConfig  # its own checks give the index settings' ranges
from dupq.modeling.model import Model


class _ModelRecord(BaseModel):
    fingerprint: StrictStr  # Model.fingerprint() of the model that encoded the stored questions
    path: Annotated[StrictStr | None, wanted("a folder name or null")] = None  # its folder (None: the bundled model)
    bundled: StrictBool = False  # built with the model bundled with the package


class Manifest(BaseModel):
    """A collection's ``manifest.json`` (keys it does not know are left alone)."""

    format: StrictStr  # the collection format (dupq.collection.collection.FORMAT)
    model: _ModelRecord
    dim: integer(1, MAX_OUT_DIM)  # the stored vectors' width, the model's
    index: dict  # IndexConfig's fields
    count: integer(0, MAX_COUNT) | None = None  # vectors in the cached index file
    trained_on: integer(1, MAX_COUNT) | None = None  # vectors an IVF-PQ index was trained on
    checksum: StrictStr | None = None  # of the cached index file (None: written before checksums)
    rebuilt: integer(0, MAX_COUNT) | None = (
        None  # HNSW graphs built again without removed questions (the file's generation)
    )

    @field_validator("index")
    @classmethod
    def _index_config(cls, index: dict) -> dict:
        try:
            IndexConfig(**index)
        except TypeError as e:
            raise corrupt(f"index holds an unknown setting ({e})") from None
        except DupqError as e:
            raise corrupt(str(e)) from None
        return index


def check_manifest(manifest: Any, where: FilePath, fmt: str) -> dict:
    """``manifest`` (parsed JSON, kept as it is: the collection updates and writes it back) once it is
    a manifest of the collection format ``fmt``; else one sentence naming ``where`` it came from."""
    if isinstance(manifest, dict) and manifest.get("format") != fmt:
        raise DupqError(
            f"{where} is not a dupq collection manifest (format {fmt!r} expected, found {manifest.get('format')!r})."
        )
    check_format(Manifest, manifest, where)
    return manifest


FORMAT = "dupq-collection/1"


def new_manifest(model: Model, config: IndexConfig) -> dict:
    bundled = model.bundled
    return {
        "format": FORMAT,
        "model": {
            "fingerprint": model.fingerprint(),
            "path": None if bundled or model.folder is None else str(model.folder),
            "bundled": bundled,
        },
        "dim": model.out_dim,
        "index": asdict(config),
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
    }


def model_for(manifest: dict, model: Model | None, where) -> Model:
    """``model``, or the one the manifest records, once its fingerprint and width match the collection's."""
    recorded, dim = manifest["model"], manifest["dim"]
    built_with = "the bundled model" if recorded.get("bundled") else f"the model at {recorded.get('path')}"
    if model is None:
        if not recorded.get("bundled") and not recorded.get("path"):
            raise DupqError(f"{where} does not record which model folder built it; pass that model (--model).")
        try:
            model = Model.load(None if recorded.get("bundled") else recorded["path"])
        except DupqError as e:
            raise DupqError(f"cannot load {built_with}, which built {where}: {e}") from None
    given = model.fingerprint()
    if given != recorded["fingerprint"]:
        what = f"the model at {model.folder}" if model.folder else "the model given"
        raise DupqError(
            f"{where} was built with {built_with} (fingerprint {recorded['fingerprint']}) but {what} has "
            f"fingerprint {given}; search it with the model that built it, or build a new collection."
        )
    if dim != model.out_dim:
        raise DupqError(
            f"the manifest of {where} is corrupt: it says dim {dim}, but its model encodes {model.out_dim} dimensions."
        )
    return model
