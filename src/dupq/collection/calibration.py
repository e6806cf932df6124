"""A collection's own search calibration: fitted on its moderators' decisions, kept in ``calibration.json``.

A model folder carries a search calibration fitted on the help-desk yardstick
(:mod:`dupq.evaluation.search_calibration`); a collection whose moderators have judged enough of its
questions may carry its own, fitted on those decisions (:func:`dupq.evaluation.collection_calibration.calibrate_collection`,
``dupq index calibrate DIR``). Its searches then judge hits with it in place of the model's.

Each decision is a labelled pair judged as a search would judge it (:func:`decision_features`): the question's
text searches the collection (itself left out), and the pair gets the features a search hit gets, its pair
logit, its cosine, and its margin over the best other hit of that search (the runner-up's cosine when the
other question comes first, the first hit's otherwise), as the yardstick's fitting computes them.

A folder collection keeps the calibration as ``calibration.json`` beside its manifest, written atomically (a
kill between the write and the rename leaves the old one); a collection in a database keeps none yet.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from pydantic import BaseModel, StrictStr

from dupq.core.files import read_json, write_json
from dupq.core.formats import check_format
from dupq.modeling.verdict import clip_cosines, pair_logits, search_margins

if TYPE_CHECKING:
    from dupq.collection.collection import Collection

log = logging.getLogger(__name__)

CALIBRATION = "calibration.json"
FORMAT = "dupq-collection-calibration/1"
HITS = 10  # the hits of a decision's search its margin is read from (as the yardstick's fitting: 10)


class CalibrationFile(BaseModel):
    """A collection's ``calibration.json``."""

    format: StrictStr  # FORMAT
    model_fingerprint: StrictStr  # the model whose logits and cosines it was fitted on
    search_calibration: dict  # the fit: weights, tiers, fitted_on, fitted_by (search_calibration's form)


def read_calibration(folder: Path | None, fingerprint: str) -> dict | None:
    """The search calibration a collection folder keeps, or None (none kept, not a folder, or fitted with
    another model: then a warning says it is not used)."""
    if folder is None or not (folder / CALIBRATION).exists():
        return None
    where = folder / CALIBRATION
    stored = check_format(CalibrationFile, read_json(where, f"the calibration of collection {folder}"), where)
    if stored.format != FORMAT or stored.model_fingerprint != fingerprint:
        log.warning("%s was fitted with another model or format; searches use the model's calibration.", where)
        return None
    return stored.search_calibration


def write_calibration(folder: Path, fingerprint: str, calibration: dict) -> None:
    """Keep ``calibration`` as the collection folder's own (atomically: the old file stays until the rename)."""
    write_json(
        folder / CALIBRATION, {"format": FORMAT, "model_fingerprint": fingerprint, "search_calibration": calibration}
    )


def decision_features(collection: Collection, decisions: list[tuple], hits: int = HITS) -> dict[str, Any]:
    """The features of each decision ``(key, other key, text, other text, label)`` as a search hit of the
    question's text: ``logits``, ``cosines``, ``margins``, ``labels`` ``(N,)`` and the pairs' vectors ``u``, ``v``
    ``(N, d)``. The search is the collection's (pending questions and the question itself left out)."""
    keys = list(dict.fromkeys(k for k, *_ in decisions))
    ids = {k: collection.get(k)[0] for k in {*keys, *(o for _, o, *_ in decisions)}}
    row = {k: n for n, k in enumerate(keys)}
    queries = collection.stored_vectors([ids[k] for k in keys])  # (Q, d) each question's own stored vector
    scores, found_ids = collection.nearest(queries, hits + 2)  # (Q, hits + 2) one more: the question itself
    own = found_ids == np.array([ids[k] for k in keys])[:, None]  # (Q, hits + 2)
    order = np.argsort(own, axis=1, kind="stable")[:, : hits + 1]  # (Q, hits + 1) the others, best first
    scores = clip_cosines(np.take_along_axis(np.where(own, -np.inf, scores), order, axis=1))
    found_ids = np.take_along_axis(np.where(own, -1, found_ids), order, axis=1)
    found = found_ids >= 0
    margins_of_hits = search_margins(np.where(found, scores, 0.0), found)  # (Q, hits + 1)
    u = queries[[row[k] for k, *_ in decisions]]  # (N, d)
    v = collection.stored_vectors([ids[o] for _, o, *_ in decisions])  # (N, d)
    cosines = clip_cosines(np.einsum("nd,nd->n", u, v).astype(np.float64))
    margins = []
    for (key, other, *_), cos in zip(decisions, cosines):
        q = row[key]
        shown = found_ids[q, :hits].tolist()
        margins.append(margins_of_hits[q, shown.index(ids[other])] if ids[other] in shown else cos - scores[q, 0])
    return {
        "logits": pair_logits(collection.model, u, v),
        "cosines": cosines,
        "margins": np.array(margins, dtype=np.float64),
        "labels": np.array([y for *_, y in decisions], dtype=np.int64),
        "u": u,
        "v": v,
    }
