"""Prometheus metrics of one service process, exposed at ``/metrics``, and where they are observed:
the routes (REST and gRPC) and the scoring report to the methods of :class:`ServiceMetrics`.

Names are shared with monitoring/prometheus/alerts.yml and the Grafana dashboards: change them
there too. Each app owns its registry, so several apps in one process (tests) never collide.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest, values
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from mlops.prediction_log import PAIRED_ROLE, PredictionInputs

_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.0075, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
_PROBABILITY_BUCKETS = tuple(round(0.05 * i, 2) for i in range(1, 21))
_BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)

SHADOW_ROLES = ("challenger", PAIRED_ROLE)  # the roles scored off the response path


class ServiceMetrics:
    """The service's counters, histograms and gauges, in a registry of its own."""

    def __init__(self) -> None:
        # Importing feast sets PROMETHEUS_MULTIPROC_DIR, which would put every value into shared
        # mmap files; this service is scraped per process, so its values stay in process memory.
        values.ValueClass = values.MutexValue
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = Counter("mlops_requests", "Answered requests.", ["route", "status"], registry=r)
        self.latency = Histogram("mlops_request_latency_seconds", "Whole-request latency.", ["route"],
                                 buckets=_LATENCY_BUCKETS, registry=r)
        self.feature_fetch = Histogram("mlops_feature_fetch_seconds", "Online feature read and computation.",
                                       buckets=_LATENCY_BUCKETS, registry=r)
        self.inference = Histogram("mlops_inference_seconds", "ONNX Runtime call.", buckets=_LATENCY_BUCKETS,
                                   registry=r)
        self.probability = Histogram("mlops_predicted_probability", "Predicted probability of the positive decision.",
                                     buckets=_PROBABILITY_BUCKETS, registry=r)
        self.unknown_entities = Counter("mlops_unknown_entities", "Requests whose entity had no history.",
                                        ["entity"], registry=r)
        self.predictions = Counter("mlops_predictions", "Scored predictions (unknown-entity rate denominator).",
                                   registry=r)
        self.retries = Counter("mlops_retried_events", "Requests for an event id already answered (answered at "
                               "the first copy's event time).", registry=r)
        self.inexact = Counter("mlops_inexact_features", "Events older than the online histories reach back "
                               "(beyond MLOPS_LATE_EVENT_ALLOWANCE_S): answered with features_exact false.",
                               registry=r)
        self._served: tuple[str, str, str] | None = None
        r.register(_ModelInfo(lambda: self._served))
        self.from_cache = Gauge("mlops_model_from_cache", "1 while the served model is the cached one (the registry "
                                "did not answer at start), 0 once the registry's is served.", registry=r)
        self.reloads = Counter("mlops_model_reloads", "Model reload attempts by result.", ["result"], registry=r)
        self.batch_size = Histogram("mlops_batch_size", "Rows per inference call.", buckets=_BATCH_BUCKETS,
                                    registry=r)
        self.shadow_dropped = Counter(
            "mlops_shadow_dropped_rows", "Rows whose off-path score (role challenger or champion-paired) was dropped: "
            "MLOPS_SHADOW_MAX_PENDING batches were already waiting for the shadow thread.", ["role"], registry=r)
        for role in SHADOW_ROLES:  # each series exists from the start at 0: a panel and a rate() see no drop as 0
            self.shadow_dropped.labels(role=role)
        self.shadow_pending = Gauge("mlops_shadow_pending", "Batches waiting for the shadow thread.", registry=r)
        self._routes: dict[tuple[str, int | str], tuple[Any, Any]] = {}  # labelled children, looked up once

    def answered(self, route: str, status: int | str, seconds: float) -> None:
        """One request of ``route`` (REST path or ``grpc:<method>``) answered with ``status`` in ``seconds``."""
        children = self._routes.get((route, status))
        if children is None:
            children = self._routes[(route, status)] = (self.requests.labels(route=route, status=str(status)),
                                                        self.latency.labels(route=route))
        children[0].inc()
        children[1].observe(seconds)

    def gathered(self, seconds: float, rows: Sequence[PredictionInputs]) -> None:
        """One online-store read and feature computation for ``rows``: their unknown entities, retries
        and inexact answers."""
        self.feature_fetch.observe(seconds)
        for row in rows:
            if row.retry:
                self.retries.inc()
            if not row.features_exact:
                self.inexact.inc()
            for entity in row.unknown_entities:
                self.unknown_entities.labels(entity=entity).inc()

    def scored(self, seconds: float, rows: int, probabilities: Iterable[float], *, with_entities: bool) -> None:
        """One ONNX Runtime call of ``rows`` rows: its time, its size and the ``probabilities`` answered.

        ``with_entities``: rows of the domain API, counted in mlops_predictions (the unknown-entity
        rate's denominator; infer requests name no entity).
        """
        self.inference.observe(seconds)
        self.batch_size.observe(rows)
        if with_entities:
            self.predictions.inc(rows)
        for probability in probabilities:
            self.probability.observe(probability)

    def shadow_dropped_rows(self, role: str, rows: int) -> None:
        """A batch of ``rows`` rows to score off the response path as ``role`` was dropped (the queue was full)."""
        self.shadow_dropped.labels(role=role).inc(rows)

    def reload_failed(self) -> None:
        self.reloads.labels(result="failed").inc()

    def serving(self, name: str, version: str, alias: str, *, from_cache: bool = False) -> None:
        """A model was loaded and is served now: counted, and mlops_model_info points at it."""
        self.reloads.labels(result="loaded").inc()
        self._served = (name, version, alias)
        self.from_cache.set(1 if from_cache else 0)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


class _ModelInfo(Collector):
    """mlops_model_info{name,version,alias} = 1 for the model served now: exactly one series, or none."""

    def __init__(self, served: Callable[[], tuple[str, str, str] | None]) -> None:
        self._served = served

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily("mlops_model_info", "The served model (value 1).",
                                   labels=["name", "version", "alias"])
        served = self._served()
        if served is not None:
            family.add_metric(list(served), 1)
        yield family
