"""Answering the jobs of a few event-loop turns together (see serving.batching): the domain
predictions (/predict, /predict/batch) and the Open Inference Protocol's infer.

Per batch, whatever the number of requests: one online-store read per view and one write (the
requests recorded in order), one ONNX Runtime call per model (the champion, and the canary for
the customers it takes), one prediction-log write. A request's own
problem (an event time in the future) fails that request alone; a failure of the store, the
champion's model or the log fails every request of the batch, and none of them is answered with a
200. A canary that fails to score hands its rows to the champion and is logged as failed (the
failure log, which the canary's error-rate check reads).
"""

from __future__ import annotations

import itertools
import logging
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel
from starlette.concurrency import run_in_threadpool

from mlops.errors import InputError, MLOpsError
from mlops.failure_log import FailureRecord, describe
from mlops.prediction_log import PredictionInputs, PredictionRecord
from serving.lifecycle import LoadedModel
from serving.predictor import prediction_record

if TYPE_CHECKING:
    from serving.state import ServiceState

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PredictJob:
    """One /predict or /predict/batch request: its validated instances."""

    requests: list[BaseModel]
    request_id: str
    started: float  # time.perf_counter() when the request arrived


@dataclass(frozen=True)
class InferJob:
    """One infer request: its tensors as columns, already checked against the graph and the contract."""

    columns: dict[str, list[Any]]
    rows: int
    id: str  # the request's own id, else its request id
    request_id: str
    started: float


@dataclass(frozen=True)
class Inference:
    loaded: LoadedModel
    probabilities: list[float]


async def answer_predictions(state: ServiceState, jobs: list[PredictJob]) -> list[list[dict[str, Any]] | Exception]:
    """Each job's answers, in its instances' order, or the exception its request answers with."""
    try:
        loaded, predictor = state.manager.require(), state.require_predictor()
    except MLOpsError as exc:
        return [exc] * len(jobs)
    results: dict[int, list[dict[str, Any]] | Exception] = {}
    accepted: list[tuple[int, PredictJob]] = []
    moments: list[datetime] = []
    for index, job in enumerate(jobs):
        try:
            moments += predictor.event_times(job.requests)
        except InputError as exc:
            results[index] = exc
            continue
        accepted.append((index, job))
    if accepted:
        requests = [request for _, job in accepted for request in job.requests]
        parts = _slices([len(job.requests) for _, job in accepted])
        try:
            # A local store (SQLite) answers in microseconds, less than a hand-off to a thread costs;
            # a networked one (Redis) is waited for off the event loop.
            if predictor.online.local:
                gathered = predictor.gather(requests, moments)
            else:
                gathered = await run_in_threadpool(predictor.gather, requests, moments)
            probabilities, models = _score_each(state, gathered, _models_for(state, loaded, gathered), loaded)
            now = time.perf_counter()
            decisions = state.contract.decisions
            records = [[prediction_record(m, g, p, decisions=decisions, request_id=job.request_id,
                                          latency_s=now - job.started, role="champion" if m is loaded else "canary")
                        for g, p, m in zip(gathered[part], probabilities[part], models[part], strict=True)]
                       for (_, job), part in zip(accepted, parts, strict=True)]
            state.prediction_log.write([record for job_records in records for record in job_records])
        except Exception as exc:  # noqa: BLE001 - the store, model or log failed: no request of the batch is answered
            results.update((index, exc) for index, _ in accepted)
        else:
            for (index, job), part, job_records in zip(accepted, parts, records, strict=True):
                state.shadow(gathered[part], job.request_id)
                state.pair(loaded, [g for g, m in zip(gathered[part], models[part], strict=True) if m is not loaded],
                           job.request_id)
                results[index] = [predictor.answer(m, record)
                                  for m, record in zip(models[part], job_records, strict=True)]
    return [results[index] for index in range(len(jobs))]


async def answer_inference(state: ServiceState, jobs: list[InferJob]) -> list[Inference | Exception]:
    """Each infer job's probabilities with the model that computed them, or its request's exception.

    A job whose inputs drive the graph to a non-finite probability (in range, yet overflowing
    inside it) is refused alone, as bad input: never answered, never logged as a NaN score.
    """
    parts = _slices([job.rows for job in jobs])
    results: list[Inference | Exception] = []
    try:
        loaded = state.manager.require()
        columns = {name: [value for job in jobs for value in job.columns[name]] for name in loaded.model.input_names}
        started = time.perf_counter()
        probabilities = [float(p) for p in loaded.model.predict_columns(columns)]
        now, features = time.perf_counter(), frozenset(state.contract.feature_names)
        records = []
        for job, part in zip(jobs, parts, strict=True):
            if not all(math.isfinite(p) for p in probabilities[part]):
                results.append(InputError("the inputs drive the model to a non-finite probability; "
                                          "they lie far outside what it was trained on", field="inputs"))
                continue
            results.append(Inference(loaded, probabilities[part]))
            for index, probability in enumerate(probabilities[part]):
                row = {name: values[index] for name, values in job.columns.items()}
                decision = state.contract.decisions.of(probability, loaded.model.threshold)
                records.append(_infer_record(loaded, job, index, row, features, probability, decision,
                                             now - job.started))
        state.metrics.scored(now - started, len(probabilities), (r.probability for r in records), with_entities=False)
        state.prediction_log.write(records)
    except Exception as exc:  # noqa: BLE001 - no request of the batch is answered
        return [exc] * len(jobs)
    return results


def _models_for(state: ServiceState, champion: LoadedModel, gathered: list[PredictionInputs]) -> list[LoadedModel]:
    """The model that answers each row: the canary for the customers it takes, else the champion."""
    canary = state.manager.canary  # read once: a batch is answered by one canary, whatever the poller does
    if canary is None:
        return [champion] * len(gathered)
    key = state.contract.entities[0].join_key
    return [canary.loaded if canary.takes(g.entities[key]) else champion for g in gathered]


def _score_each(state: ServiceState, gathered: list[PredictionInputs], models: list[LoadedModel],
                champion: LoadedModel) -> tuple[list[float], list[LoadedModel]]:
    """Each row's probability and the model that gave it: one ONNX Runtime call per model, the
    champion's last. A canary that fails to score leaves its rows to the champion (the customer is
    answered), its failure logged for the canary's error-rate check; a champion that fails fails the
    batch, its failure logged too."""
    predictor = state.require_predictor()
    answered_by = list(models)
    probabilities = [0.0] * len(gathered)
    canaries = {id(m): m for m in models if m is not champion}
    for model in [*canaries.values(), champion]:
        indices = [i for i, m in enumerate(answered_by) if m is model]
        if not indices:
            continue
        try:
            scored = predictor.score(model, [gathered[i] for i in indices])
        except Exception as exc:
            _log_failure(state, model, "champion" if model is champion else "canary", len(indices), exc)
            if model is champion:
                raise
            for index in indices:
                answered_by[index] = champion
            continue
        for index, probability in zip(indices, scored, strict=True):
            probabilities[index] = probability
    return probabilities, answered_by


def _log_failure(state: ServiceState, model: LoadedModel, role: str, rows: int, exc: Exception) -> None:
    log.warning("%s v%s (%s) failed to score %d row(s): %s", model.served.name, model.served.version, role, rows,
                describe(exc))
    try:
        state.failure_log.write([FailureRecord(logged_at=datetime.now(UTC), model_name=model.served.name,
                                               model_version=model.served.version, role=role, rows=rows,
                                               error=describe(exc))])
    except OSError:  # the failure log is evidence, never a reason to fail a request
        log.exception("the failure log could not be written")


def _slices(sizes: Sequence[int]) -> list[slice]:
    """The consecutive slices of a batch's rows that belong to jobs of these sizes."""
    offsets = list(itertools.accumulate(sizes, initial=0))
    return [slice(start, end) for start, end in itertools.pairwise(offsets)]


def _infer_record(loaded: LoadedModel, job: InferJob, index: int, row: dict[str, Any], features: frozenset[str],
                  probability: float, decision: str, latency: float) -> PredictionRecord:
    now = datetime.now(UTC)
    return PredictionRecord.model_construct(  # values already checked against the graph and contract
        event_id=f"{job.id}/{index}", event_timestamp=now, logged_at=now, entities={},
        inputs={k: v for k, v in row.items() if k not in features},
        features={k: float(v) for k, v in row.items() if k in features},
        unknown_entities=[], unknown_categories=[], probability=probability,
        decision=decision,
        model_name=loaded.served.name, model_version=loaded.served.version, request_id=job.request_id,
        latency_s=latency,
    )
