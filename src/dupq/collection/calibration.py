"""A collection's own search calibration: fitted on its moderators' decisions, kept in ``calibration.json``.

A collection whose moderators judged enough of its questions may carry a calibration of its own
(:func:`dupq.evaluation.collection_calibration.calibrate_collection`, ``dupq index calibrate DIR``), judging its hits in
place of the model's. Each decision is a pair judged as a search would judge it
(:func:`dupq.evaluation.collection_calibration.decision_features`): its pair
logit, its cosine and its margin over the best other hit of the search its text makes (itself left out).

A folder keeps it in ``calibration.json``, written atomically; a database collection keeps none yet.
:class:`KeptCalibration` reads the file again whenever it changes (inode, size, mtime), so every process judges with the
newest fit at its next search. **Scopes**: one fit per value of a metadata field (``--scope category``); a hit is judged
by its value's fit (:func:`judge_hits`), or the collection's where its value has none. A value is the field's text or a
number's text (:func:`scope_value`, which the review queue's category filter reads too).
"""

from __future__ import annotations

import functools
import logging
import os
import threading
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np
from pydantic import BaseModel, StrictStr

from dupq.core.errors import DupqError
from dupq.core.files import read_json, write_json
from dupq.core.formats import check_format
from dupq.modeling.verdict import DUPLICATE, Verdicts, for_search

log = logging.getLogger(__name__)

CALIBRATION = "calibration.json"
FORMAT = "dupq-collection-calibration/1"


class Scopes(BaseModel):
    """The fits of a calibration's scopes."""

    field: StrictStr  # the metadata field whose values are the scopes
    fits: dict[str, dict]  # a search calibration per value with enough decisions (search_calibration's form)


class CalibrationFile(BaseModel):
    """A collection's ``calibration.json``."""

    format: StrictStr  # FORMAT
    model_fingerprint: StrictStr  # the model whose logits and cosines it was fitted on
    search_calibration: dict  # the fit: weights, tiers, fitted_on, fitted_by (search_calibration's form)
    scopes: Scopes | None = None  # one fit per value of a metadata field; None: the collection's judges every hit


def read_calibration(folder: Path | None, fingerprint: str) -> tuple[dict | None, dict | None]:
    """The search calibration a collection folder keeps and its scopes (``{"field", "fits"}``), each None where
    there is none (none kept, not a folder, or fitted with another model: then a warning says it is not used)."""
    if folder is None or not (folder / CALIBRATION).exists():
        return None, None
    where = folder / CALIBRATION
    stored = check_format(CalibrationFile, read_json(where, f"the calibration of collection {folder}"), where)
    if stored.format != FORMAT or stored.model_fingerprint != fingerprint:
        log.warning("%s was fitted with another model or format; searches use the model's calibration.", where)
        return None, None
    return stored.search_calibration, None if stored.scopes is None else stored.scopes.model_dump()


def write_calibration(folder: Path, fingerprint: str, calibration: dict, scopes: dict | None = None) -> None:
    """Keep ``calibration`` (and its ``scopes``) as the collection folder's own (atomically: the old file stays
    until the rename)."""
    kept = {"format": FORMAT, "model_fingerprint": fingerprint, "search_calibration": calibration}
    write_json(folder / CALIBRATION, kept | ({"scopes": scopes} if scopes else {}))


def _stamp(folder: Path | None) -> tuple | None:
    """What tells one ``calibration.json`` from the next (an atomic rename gives a new inode), or None without one."""
    try:
        st = os.stat(folder / CALIBRATION) if folder is not None else None
    except FileNotFoundError:
        return None
    return None if st is None else (st.st_ino, st.st_mtime_ns, st.st_size)


class KeptCalibration:
    """The calibration a collection folder keeps, read again whenever its file changes: a refit of another
    process (a worker of the service, ``dupq index calibrate``) reaches this one at its next search."""

    def __init__(self, folder: Path | None, fingerprint: str):
        self.folder, self.fingerprint = folder, fingerprint
        self._lock = threading.Lock()
        self._stamp = _stamp(folder)
        self._fit, self._scopes = read_calibration(folder, fingerprint)  # a damaged file refuses the open

    def current(self) -> tuple[dict | None, dict | None]:
        """The calibration and its scopes as the file says now (one ``stat`` when it has not changed). A file
        that cannot be read any more (damaged by hand) is warned of, and the calibration read before stays."""
        stamp = _stamp(self.folder)
        if stamp != self._stamp:
            with self._lock:
                if stamp != self._stamp:
                    try:
                        self._fit, self._scopes = read_calibration(self.folder, self.fingerprint)
                    except DupqError as e:
                        log.warning("%s; searches keep the calibration read before.", str(e).rstrip("."))
                    self._stamp = stamp
        return self._fit, self._scopes

    def keep(self, calibration: dict, scopes: dict | None, where) -> None:
        """Write ``calibration`` and its ``scopes`` as the folder's own, and judge with them from now on (a
        collection ``where`` that is no folder is refused in one sentence)."""
        if self.folder is None:
            raise DupqError(f"{where} cannot keep its own calibration yet; only a folder collection can.")
        write_calibration(self.folder, self.fingerprint, calibration, scopes)
        with self._lock:
            self._fit, self._scopes, self._stamp = calibration, scopes, _stamp(self.folder)

    def info(self, model_fit: dict | None) -> dict:
        """What judges the hits: ``{"source": "collection" (its own, fitted on its decisions), "model" (the
        model's, ``model_fit``) or None (the model has none), "fitted_on", "fitted_by", "scopes"}``; ``scopes``:
        None, or the field and, per value fitted, what its fit was fitted on."""
        own, scopes = self.current()
        fit = own if own is not None else model_fit
        source = None if fit is None else ("collection" if own is not None else "model")
        fit = fit or {}
        if own is not None and scopes:
            scopes = {"field": scopes["field"], "fitted": {v: f.get("fitted_on") for v, f in scopes["fits"].items()}}
        return {
            "source": source,
            "fitted_on": fit.get("fitted_on"),
            "fitted_by": fit.get("fitted_by"),
            "scopes": scopes if own is not None else None,
        }


def scope_value(metadata: dict, field: str) -> str | None:
    """A question's value of the metadata ``field`` as text (a number's too), None without one (or another type)."""
    value = metadata.get(field)
    return str(value) if isinstance(value, (str, int, float)) and not isinstance(value, bool) else None


def judge_hits(
    judge,
    cosines: np.ndarray,
    margins: np.ndarray,
    vectors: Callable[[], tuple[np.ndarray, np.ndarray]],
    calibration: dict | None,
    scopes: dict | None = None,
    metadata: Callable[[], list[dict]] | None = None,
) -> Verdicts:
    """Search hits ``(H,)`` judged as :func:`~dupq.modeling.verdict.for_search` judges them with ``calibration``,
    each hit whose scope (its ``metadata()``'s value of the scopes' field) has a fit of its own by that fit."""
    judged = for_search(judge, cosines, margins, vectors=vectors, calibration=calibration)
    if not scopes or calibration is None or metadata is None or not len(cosines):
        return judged
    pairs = functools.cache(vectors)  # (H, d), (H, d) at most once
    values = np.array([scope_value(m, scopes["field"]) for m in metadata()], dtype=object)  # (H,)
    probability, tier = judged.probability.copy(), judged.tier.copy()
    for value, fit in scopes["fits"].items():
        mask = values == value  # (H,)
        if mask.any():
            own = for_search(
                judge,
                cosines[mask],
                margins[mask],
                vectors=lambda m=mask: tuple(x[m] for x in pairs()),
                calibration=fit,
            )
            probability[mask], tier[mask] = own.probability, own.tier
    return replace(judged, probability=probability, score=probability, tier=tier, duplicate=tier == DUPLICATE)
