"""``GET /metrics``: the service's counters in Prometheus' text format (prometheus-client).

``dupq_requests_total{route, method, status}``, ``dupq_request_seconds{route}`` (by the route's template, not each key),
``dupq_questions_{added,removed,updated}_total``, ``dupq_questions_stored`` and ``dupq_index_age_seconds`` (how long ago
the answering process's index caught up; 0 for Milvus).

With several workers, prometheus-client's multiprocess mode: ``serve`` gives them a shared folder
(``PROMETHEUS_MULTIPROC_DIR``) where each writes its values; a scrape sums the counters of all, shows the latest
``dupq_questions_stored`` and one ``dupq_index_age_seconds`` per live worker (label ``pid``). An inherited
``PROMETHEUS_MULTIPROC_DIR`` is refused (:func:`~dupq.service.workers.refuse_inherited_metrics`).
"""

from __future__ import annotations

import functools
import os
import time

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from dupq.service.workers import MULTIPROCESS_ENV

REGISTRY = CollectorRegistry(auto_describe=True)  # the service's own, not the process-wide default

REQUESTS = Counter(
    "dupq_requests", "Requests answered, by route, method and status.", ["route", "method", "status"], registry=REGISTRY
)
LATENCY = Histogram(
    "dupq_request_seconds",
    "Seconds from a request's arrival to its answer, by route.",
    ["route"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
    registry=REGISTRY,
)
ADDED = Counter("dupq_questions_added", "Questions stored through POST /questions.", registry=REGISTRY)
REMOVED = Counter("dupq_questions_removed", "Questions removed through DELETE /questions/{key}.", registry=REGISTRY)
UPDATED = Counter("dupq_questions_updated", "Questions changed through PUT or a decision.", registry=REGISTRY)
STORED = Gauge(
    "dupq_questions_stored", "Questions in the collection.", registry=REGISTRY, multiprocess_mode="mostrecent"
)
INDEX_AGE = Gauge(
    "dupq_index_age_seconds",
    "Seconds since this process's index last caught up with the store.",
    registry=REGISTRY,
    multiprocess_mode="liveall",
)


def index_age(collection) -> float:
    refreshed = collection.refreshed()
    return 0.0 if refreshed is None else max(0.0, time.time() - refreshed)


class RequestMetrics:
    """ASGI middleware: count and time every HTTP answer by its route's template and status."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        started, status = time.perf_counter(), [500]

        async def sending(message):
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            # the route's template without its converters: "/questions/{key}", not "{key:path}"
            route = getattr(scope.get("route"), "path_format", None) or "unmatched"
            counted, timed = _series(route, scope["method"], status[0])
            counted.inc()
            timed.observe(time.perf_counter() - started)
            collection = getattr(getattr(scope.get("app"), "state", None), "collection", None)
            if collection is not None:
                try:
                    INDEX_AGE.set(index_age(collection))
                except Exception:  # noqa: BLE001 -- a closed collection at shutdown: nothing to report
                    pass


@functools.lru_cache(maxsize=1024)  # routes x methods x statuses: a few dozen; labels() costs more than inc()
def _series(route: str, method: str, status: int):
    """The request counter's and the latency histogram's series of one route, method and status."""
    return REQUESTS.labels(route, method, str(status)), LATENCY.labels(route)


def exposition(collection) -> tuple[bytes, str]:
    """The metrics in Prometheus' text format (all workers' in multiprocess mode), and its content type."""
    STORED.set(len(collection))
    INDEX_AGE.set(index_age(collection))
    if os.environ.get(MULTIPROCESS_ENV):
        from prometheus_client import multiprocess

        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
        return generate_latest(registry), CONTENT_TYPE_LATEST
    return generate_latest(REGISTRY), CONTENT_TYPE_LATEST
