"""The teacher itself as a dupq model folder, judged as ``dupq train`` judges its models (``dupq distil export``)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from dupq.core.files import DupqError, new_folder, readable
from dupq.data.pairs import Pairs
from dupq.evaluation.evaluate import calibrate_and_test
from dupq.modeling.encoders import SentenceConfig
from dupq.modeling.formats import check_files
from dupq.modeling.pretrained import load_sentence_transformer
from dupq.modeling.sentence_model import SUBFOLDER, SentenceModel, check_new_model_folder, width


def export_teacher(
    teacher: str | None,
    out: str | os.PathLike,
    dev: Pairs,
    test: Pairs,
    info: dict[str, Any],
    device: str = "cpu",
    overwrite: bool = False,
) -> tuple[SentenceModel, dict[str, Any]]:
    """Make the sentence-transformers model ``teacher`` (default: the packaged all-MiniLM-L6-v2) the
    dupq model folder ``out``, judged as ``dupq train`` judges its models.

    Its threshold and calibration are fitted on the ``dev`` pairs and its figures on the ``test``
    pairs only reported (:func:`dupq.evaluation.evaluate.calibrate_and_test`); ``info`` (data, split,
    command) is kept as ``training`` in metrics.json. The folder is written beside ``out`` and
    renamed into place, so a failure leaves ``out`` as it was. Returns the model and the
    ``{"calibration", "test"}`` record.
    """
    out = Path(out)
    check_new_model_folder(out, overwrite)
    if not len(dev) or not len(test):
        raise DupqError(
            f"a model's threshold is chosen on dev pairs and reported on test pairs; this split has "
            f"{len(dev)} dev and {len(test)} test pairs (give both --dev-size and --test-size rows)."
        )
    transformer, name = load_sentence_transformer(teacher, device)
    transformer.float()  # stored as float32, whatever the teacher's folder held
    with new_folder(out) as tmp:
        files = tmp / SUBFOLDER
        transformer.save(str(files))
        check_files(files)
        readable(files)
        config = SentenceConfig(width(transformer), transformer.max_seq_length, name)
        model = SentenceModel(transformer, config, files, metrics={"training": {"teacher": name, **info}})
        record = calibrate_and_test(model, dev, test)
        model._write_json(tmp)
    model.folder = out.resolve()
    model.files = model.folder / SUBFOLDER
    return model, record
