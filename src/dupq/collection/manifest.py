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
    dim: integer(1, MAX_OUT_DIM) | None = None  # a reranker's vector width (the collection's model: Manifest.dim)


class Manifest(BaseModel):
    """A collection's ``manifest.json`` (keys it does not know are left alone)."""

    format: StrictStr  # the collection format (dupq.collection.collection.FORMAT)
    model: _ModelRecord
    rerank: _ModelRecord | None = None  # the model that reorders a search's candidates (None: none does)
    dim: integer(1, MAX_OUT_DIM)  # the stored vectors' width, the model's
    index: dict  # IndexConfig's fields
    count: integer(0, MAX_COUNT) | None = None  # vectors in the cached index file
    trained_on: integer(1, MAX_COUNT) | None = None  # vectors an IVF-PQ index was trained on
    checksum: StrictStr | None = None  # of the cached index file (None: written before checksums)
    # HNSW graphs built again without removed questions (the file's generation)
    rebuilt: integer(0, MAX_COUNT) | None = None

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


def _record(model: Model) -> dict:
    """What a manifest records of a model: its fingerprint and folder (None: the bundled model)."""
    bundled = model.bundled
    return {
        "fingerprint": model.fingerprint(),
        "path": None if bundled or model.folder is None else str(model.folder),
        "bundled": bundled,
    }


def new_manifest(model: Model, config: IndexConfig, rerank: Model | None = None) -> dict:
    """A new collection's manifest: ``model`` encodes its questions, ``rerank`` (if any) reorders a search's candidates."""
    manifest = {
        "format": FORMAT,
        "model": _record(model),
        "dim": model.out_dim,
        "index": asdict(config),
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    if rerank is not None:
        manifest["rerank"] = {**_record(rerank), "dim": rerank.out_dim}
    return manifest


def model_for(manifest: dict, model: Model | None, where) -> Model:
    """``model``, or the one the manifest records, once its fingerprint and width match the collection's."""
    return _checked(manifest["model"], manifest["dim"], model, where, "built", "--model")


def reranker_for(manifest: dict, rerank: Model | None, where) -> Model | None:
    """``rerank``, or the reranker the manifest records (None when it records none), checked as :func:`model_for`
    checks the model."""
    recorded = manifest.get("rerank")
    if recorded is None:
        if rerank is not None:
            raise DupqError(f"{where} records no reranker to check the one given against.")
        return None
    return _checked(recorded, recorded["dim"], rerank, where, "reranks", "the reranker")


def _checked(recorded: dict, dim: int, model: Model | None, where, role: str, option: str) -> Model:
    """``model`` (or, None, the one ``recorded`` names) once its fingerprint and width are the recorded ones;
    ``role`` says what the recorded model does (``built``, ``reranks``), ``option`` how to pass another."""
    named = "the bundled model" if recorded.get("bundled") else f"the model at {recorded.get('path')}"
    if model is None:
        if not recorded.get("bundled") and not recorded.get("path"):
            raise DupqError(f"{where} does not record which model folder {role} it; pass that model ({option}).")
        try:
            model = Model.load(None if recorded.get("bundled") else recorded["path"])
        except DupqError as e:
            raise DupqError(f"cannot load {named}, which {role} {where}: {e}") from None
    given = model.fingerprint()
    if given != recorded["fingerprint"]:
        what = f"the model at {model.folder}" if model.folder else "the model given"
        raise DupqError(
            f"{where} {'was built' if role == 'built' else 'is reranked'} with {named} (fingerprint "
            f"{recorded['fingerprint']}) but {what} has fingerprint {given}; "
            f"{'search it with the model that built it' if role == 'built' else 'rerank with the model it records'}, "
            "or build a new collection."
        )
    if dim != model.out_dim:
        raise DupqError(
            f"the manifest of {where} is corrupt: it says dim {dim}, but its model encodes {model.out_dim} dimensions."
        )
    return model
