"""The service refits its collection's calibration by itself: after every ``N`` decisions (``dupq serve --refit-every N``).

Each recorded decision counts the pairs it judged (a duplicate of one question: one; distinct from
three: three; kept as new: none). When a worker has counted :data:`REFIT_EVERY` (or ``N``) since
its last refit, a background thread refits as ``dupq index calibrate`` does (with the kept
calibration's scope) and writes it atomically; the request that crossed the count is answered at
once. One refit at a time: in a worker, decisions meanwhile count towards the next; across
workers, a lock file (:data:`LOCK_FILE`) lets one refit and skips the others' turn. A refused or
failed refit is logged in one line and the kept calibration stays.

>>> refits = Refitter(collection, every=50)   # doctest: +SKIP
>>> refits.decided(1)                          # doctest: +SKIP
"""

from __future__ import annotations

import logging
import threading

REFIT_EVERY = 50  # decisions a worker records between two refits: above the fit's floor of 30, so the first
# refit has decisions enough once a desk has 50; fewer: refits refused, more: a desk waits longer for its verdict
LOCK_FILE = "calibration.lock"  # held by the worker that is refitting
STOP_WAIT_S = 30  # how long a stopping service waits for a refit under way

log = logging.getLogger(__name__)


class Refitter:
    """Counts a worker's decisions and refits the collection's calibration in a background thread every ``every``
    (0: never; a collection that cannot keep a calibration of its own, in a database, is never refitted)."""

    def __init__(self, collection, every: int = REFIT_EVERY):
        self.collection = collection
        self.every = every if collection.folder is not None else 0
        self.refits = 0  # refits this worker has finished (kept or refused), for tests and logs
        self._counted = 0
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        if every and collection.folder is None:
            log.info("%s cannot keep its own calibration, so the service does not refit it.", collection.location)

    def decided(self, pairs: int) -> None:
        """Count ``pairs`` newly judged pairs; start a refit when they make ``every`` (never blocks)."""
        if not self.every or not pairs:
            return
        with self._lock:
            self._counted += pairs
            if self._counted < self.every or self._thread is not None:
                return
            self._counted = 0
            self._thread = threading.Thread(target=self._run, name="dupq-refit", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        try:
            while True:
                self.refit()
                with self._lock:
                    self.refits += 1
                    if self._counted < self.every:  # the decisions of the refit's time make the next one, if enough
                        return
                    self._counted = 0
        finally:
            with self._lock:
                self._thread = None

    def refit(self) -> None:
        """Fit and keep the collection's calibration once, or log in one line why not."""
        from dupq.core.errors import DupqError
        from dupq.core.files import file_lock
        from dupq.evaluation.collection_calibration import calibrate_collection

        where = self.collection.location
        try:
            with file_lock(self.collection.folder / LOCK_FILE, timeout=0):
                scope = (self.collection.calibration_scopes or {}).get("field")
                report = calibrate_collection(self.collection, scope=scope)
        except TimeoutError:
            log.info("another worker is refitting the calibration of %s; this one's turn is skipped.", where)
        except DupqError as e:
            log.warning("the calibration of %s was not refitted: %s", where, e)
        except Exception as e:  # a failed fit must not end the service; the old calibration stays
            log.warning("the refit of %s's calibration failed (%s: %s); the old one stays.", where, type(e).__name__, e)
        else:
            log.info(
                "refitted the calibration of %s on %d decisions: tiers suggest %.4f, duplicate %.4f",
                where,
                report["decisions"],
                report["calibration"]["suggest"],
                report["calibration"]["duplicate"],
            )

    def wait(self, timeout: float | None = STOP_WAIT_S) -> None:
        """Wait for a refit under way (before the collection is closed)."""
        thread = self._thread
        if thread is not None:
            thread.join(timeout)
