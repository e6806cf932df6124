"""The teacher itself as a dupq model folder, judged as ``dupq train`` judges its models (``dupq distil teacher-model``)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from dupq.core.errors import DupqError
from dupq.core.files import readable
from dupq.data.pairs import Pairs
from dupq.evaluation.evaluate import calibrate_and_test
from dupq.modeling.encoders import SentenceConfig
from dupq.modeling.folder_format import check_files, check_new_model_folder
from dupq.modeling.model import Model, new_model_folder
from dupq.modeling.pretrained import load_sentence_transformer, quantize, runs_int8
from dupq.modeling.sentence_model import SUBFOLDER, JoinedEncoder, TransformerEncoder, width
from dupq.modeling.static import check_weight

STUDENT = "student"  # the subfolder of a joined model that holds the LSTM model
JOIN_WEIGHT = 0.25  # --join's default w: the best mean of the help-desk and Quora dev MRR@10 (docs/experiments/10-help-desks-first.md)


def export_teacher(
    teacher: str | None,
    out: str | os.PathLike,
    dev: Pairs,
    test: Pairs,
    info: dict[str, Any],
    device: str = "cpu",
    overwrite: bool = False,
    join: Model | None = None,
    join_weight: float = 0.0,
) -> tuple[Model, dict[str, Any]]:
    """Make the sentence-transformers model ``teacher`` (default: the packaged all-MiniLM-L6-v2) the
    dupq model folder ``out``, judged as ``dupq train`` judges its models.

    Its threshold and calibration are fitted on the ``dev`` pairs and its figures on the ``test``
    pairs only reported (:func:`dupq.evaluation.evaluate.calibrate_and_test`); ``info`` (data, split,
    command) is kept as ``training`` in metrics.json. The folder is written beside ``out`` and
    renamed into place, so a failure leaves ``out`` as it was. ``join``: a dupq LSTM model whose
    vectors are joined to the teacher's at ``join_weight`` (:func:`dupq.modeling.static.join_vectors`),
    kept in the folder's ``student`` subfolder. Returns the model and the ``{"calibration", "test"}`` record.
    """
    out = Path(out)
    check_new_model_folder(out, overwrite)
    join_weight = check_weight(join_weight, "the join weight")
    if not len(dev) or not len(test):
        raise DupqError(
            f"a model's threshold is chosen on dev pairs and reported on test pairs; this split has "
            f"{len(dev)} dev and {len(test)} test pairs (give both --dev-size and --test-size rows)."
        )
    int8 = teacher is not None and runs_int8(teacher) and device == "cpu"  # a named model's: int8 on a CPU
    transformer, name = load_sentence_transformer(teacher, device, int8=False)
    transformer.float()  # stored as float32, whatever the teacher's folder held
    with new_model_folder(out) as tmp:
        files = tmp / SUBFOLDER
        transformer.save(str(files))
        check_files(files)
        readable(files)
        if int8:
            quantize(transformer)  # saved in float32 above, judged as it will run
        config = SentenceConfig(width(transformer), transformer.max_seq_length, name, int8=int8)
        encoder: TransformerEncoder | JoinedEncoder = TransformerEncoder(transformer, config, files)
        if join is not None:
            join.encoder.lstm("--join takes a dupq LSTM model (a folder or bundled), not a sentence model.")
            config = SentenceConfig(
                config.dim, config.max_seq_length, name, join=STUDENT, join_weight=join_weight, int8=int8
            )
            join.save(tmp / STUDENT, half=None)  # at the precision its folder stores
            join = Model.load(tmp / STUDENT)
            info = {**info, "join": {"model": join.fingerprint(), "weight": join_weight}}
            encoder = JoinedEncoder(TransformerEncoder(transformer, config, files), join)
        model = Model(encoder, metrics={"training": {"teacher": name, **info}})
        record = calibrate_and_test(model, dev, test)
        model.folder = tmp.resolve()
        model.save(tmp)  # into its own folder: config.json and metrics.json only
    model.folder = out.resolve()
    encoder.moved_to(model.folder)
    return model, record
