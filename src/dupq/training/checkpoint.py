"""The checkpoint of a run: one ``checkpoint.safetensors`` with weights, Adam moments and the run's state as JSON.

Written after every epoch (temporary file, then rename) so that a killed run resumes where it stopped with
the same weights as one never interrupted; weights that are not finite are never written.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, safe_open, save

from dupq.core.errors import DupqError
from dupq.core.files import atomic_write, check_new_folder, parse_json
from dupq.core.options import label, option_fields
from dupq.data.pairs import SplitConfig
from dupq.modeling.encoders import SENTENCE_TRANSFORMERS
from dupq.modeling.folder_format import check_new_model_folder, stored_kind
from dupq.training.config import CHECKPOINT, RESUMABLE, ModelOptions, TrainConfig, renamed
from dupq.training.step import Siamese


def _finite(state: dict[str, torch.Tensor]) -> bool:
    return all(bool(torch.isfinite(t).all()) for t in state.values() if t.is_floating_point())


def save_checkpoint(
    path: Path, model: Siamese, best: dict[str, torch.Tensor], optimizer: torch.optim.Optimizer, meta: dict[str, Any]
) -> None:
    tensors = {f"model.{k}": v.detach().contiguous() for k, v in model.state_dict().items()}
    tensors.update({f"best.{k}": v.detach().contiguous() for k, v in best.items()})
    state = optimizer.state_dict()
    for pid, slots in state["state"].items():
        for name, value in slots.items():
            tensors[f"optim.{pid}.{name}"] = torch.as_tensor(value).contiguous()
    if not _finite(tensors):
        raise DupqError(
            f"training diverged (weights that are not finite numbers) in epoch {meta['epoch']}; "
            f"{path} still holds the last good epoch. Lower --lr and start again."
        )
    meta = {**meta, "param_groups": state["param_groups"]}
    atomic_write(path, save(tensors, metadata={"dupq": json.dumps(meta)}))


def load_checkpoint(
    path: Path,
) -> tuple[dict[str, Any], dict[str, torch.Tensor], dict[str, torch.Tensor], dict[str, Any]]:
    """Returns ``(meta, model_state, best_state, optimizer_state)`` from a checkpoint file."""
    try:
        with safe_open(path, "pt") as f:
            meta = parse_json((f.metadata() or {})["dupq"], "its metadata", path)
        tensors = load_file(path)
    except (SafetensorError, OSError, KeyError, DupqError) as e:
        raise DupqError(
            f"the checkpoint {path} is corrupt ({type(e).__name__}: {e}); delete it to start again."
        ) from None
    if not isinstance(meta, dict) or not _finite(tensors):
        raise DupqError(
            f"the checkpoint {path} is corrupt (weights that are not finite numbers); delete it to start again."
        )
    model_state = {k.removeprefix("model."): v for k, v in tensors.items() if k.startswith("model.")}
    best_state = {k.removeprefix("best."): v for k, v in tensors.items() if k.startswith("best.")}
    slots: dict[int, dict[str, torch.Tensor]] = {}
    for key, value in tensors.items():
        if key.startswith("optim."):
            _, pid, name = key.split(".", 2)
            slots.setdefault(int(pid), {})[name] = value
    return meta, model_state, best_state, {"state": slots, "param_groups": meta.pop("param_groups")}


def check_output_folder(out: Path, resume: bool, overwrite: bool) -> None:
    """Refuse to silently discard the checkpoint of an earlier run in ``out``."""
    if resume and overwrite:
        raise DupqError("--resume continues the checkpoint and --overwrite discards it: pass one of them.")
    if (Path(out) / CHECKPOINT).exists() and not (resume or overwrite):
        raise DupqError(
            f"{out} already holds a training checkpoint; pass --resume to continue it or --overwrite to start again."
        )
    if not resume:  # a killed run's folder (a checkpoint, no model yet) may be started again; else a model's only
        (check_new_folder if (Path(out) / CHECKPOINT).exists() else check_new_model_folder)(Path(out), overwrite)
    if stored_kind(Path(out)) == SENTENCE_TRANSFORMERS:
        raise DupqError(
            f"{out} holds a sentence-transformers model (dupq distil teacher-model), which dupq train can neither resume "
            f"nor replace; write the LSTM to another --out."
        )


def check_resume(
    meta: dict[str, Any], config: TrainConfig, options: ModelOptions, split: dict[str, Any] | None
) -> None:
    """Refuse to resume with options that differ from the checkpoint's, naming the first one."""
    asked = {**asdict(config), **{f"model.{k}": v for k, v in asdict(options).items()}}
    stored = {**renamed(meta.get("train", {})), **{f"model.{k}": v for k, v in meta.get("options", {}).items()}}
    if split is not None and meta.get("split") is not None:
        asked.update({f"split.{k}": v for k, v in split.items()})
        stored.update({f"split.{k}": v for k, v in meta["split"].items()})
    for name, value in asked.items():
        if name in RESUMABLE or name not in stored:
            continue
        if stored[name] != value:
            key = name.split(".")[-1]
            named = {
                f.name: label(f) for config in (TrainConfig, ModelOptions, SplitConfig) for f in option_fields(config)
            }
            raise DupqError(
                f"--resume with {named.get(key, key)} {value} but the checkpoint was trained with {stored[name]}; "
                f"resume with the same options (only --epochs, --threads and --device may change) or start again with --overwrite."
            )
