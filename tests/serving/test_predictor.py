"""The serving predictor's decisions, fast: a real Feast online store (SQLite) and a real ONNX graph
whose probability is the request's amount, so each test picks the score it needs exactly.

test_app.py checks the same predictor inside the whole service (a trained model, seconds per test);
these tests run in about a second, so `make mutation` can run them per mutant.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from pydantic import BaseModel

from feature_repo.online import open_online_features
from feature_repo.store import publish_features
from mlops.contract import DataContract
from mlops.errors import InputError
from mlops.inference import OnnxModel
from mlops.prediction_log import PredictionInputs
from mlops.registry import ServedModel
from mlops.settings import Settings
from serving.lifecycle import LoadedModel
from serving.metrics import ServiceMetrics
from serving.predictor import Predictor, prediction_record
from serving.schemas import build_request_model

pytestmark = pytest.mark.unit

THRESHOLD = 0.5  # exact in float32, the graph's output type
SKEW = timedelta(seconds=30)
WHEN = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)


def _amount_is_the_probability(path: Path) -> Path:
    graph = helper.make_graph(
        [helper.make_node("Identity", ["amount"], ["probability"])], "amount-as-probability",
        [helper.make_tensor_value_info("amount", TensorProto.FLOAT, ["batch", 1])],
        [helper.make_tensor_value_info("probability", TensorProto.FLOAT, ["batch", 1])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)], ir_version=10)
    helper.set_model_props(model, {"threshold": str(THRESHOLD)})
    onnx.save(model, str(path))
    return path


@pytest.fixture(scope="module")
def loaded(tmp_path_factory: pytest.TempPathFactory) -> LoadedModel:
    path = _amount_is_the_probability(tmp_path_factory.mktemp("graph") / "model.onnx")
    return LoadedModel(served=ServedModel("fraud-test", "7", "run-1", path), model=OnnxModel(path), alias="production")


@pytest.fixture(scope="module")
def predictor(contract: DataContract, tmp_path_factory: pytest.TempPathFactory) -> Predictor:
    seed = {"transaction_id": "seed", "customer_id": "seed", "merchant_id": "seed", "event_timestamp": WHEN,
            "amount": 1.0}
    import pandas as pd

    settings = Settings(home=tmp_path_factory.mktemp("online"))
    publish_features(pd.DataFrame([seed]), contract, settings)
    return Predictor(contract, open_online_features(settings, contract), ServiceMetrics(), max_clock_skew=SKEW)


@pytest.fixture(scope="module")
def request_model(contract: DataContract) -> type[BaseModel]:
    return build_request_model(contract)


def _request(request_model: type[BaseModel], **fields: Any) -> BaseModel:
    tag = uuid.uuid4().hex[:8]  # the online store is shared by the module's tests
    body = {"transaction_id": f"T-{tag}", "customer_id": f"C-{tag}", "merchant_id": f"M-{tag}",
            "event_timestamp": WHEN, "amount": 0.25, "merchant_category": "fuel", "channel": "pos",
            "country": "DE"}
    merged = {**body, **fields}
    moment = merged["event_timestamp"]
    # The request takes RFC 3339 text, as in a JSON body.
    return request_model.model_validate({**merged, "event_timestamp": moment and moment.isoformat()})


def _gather(predictor: Predictor, request: BaseModel) -> PredictionInputs:
    [gathered] = predictor.gather([request], predictor.event_times([request]))
    return gathered


def _counter(predictor: Predictor, name: str, **labels: str) -> float:
    return predictor.metrics.registry.get_sample_value(name, labels) or 0.0


@pytest.mark.parametrize(("amount", "decision"), [
    (THRESHOLD, "fraud"), (float(np.nextafter(np.float32(THRESHOLD), np.float32(0))), "legit"), (0.875, "fraud")])
def test_the_decision_is_probability_at_or_above_the_threshold(
        predictor: Predictor, loaded: LoadedModel, request_model: type[BaseModel], amount: float,
        decision: str) -> None:
    gathered = _gather(predictor, _request(request_model, amount=amount))
    [probability] = predictor.score(loaded, [gathered])
    assert probability == amount
    assert (gathered.unknown_entities, gathered.unknown_categories) == (["customer", "merchant"], [])
    record = prediction_record(loaded, gathered, probability, decisions=predictor.contract.decisions,
                               request_id="r1", latency_s=None)
    assert record.decision == decision
    assert predictor.answer(loaded, record)["decision"] == decision


def test_answer_and_log_record_carry_the_request_and_the_model(
        predictor: Predictor, loaded: LoadedModel, request_model: type[BaseModel]) -> None:
    request = _request(request_model, amount=0.75, merchant_category="casino")
    gathered = _gather(predictor, request)
    [probability] = predictor.score(loaded, [gathered])

    record = prediction_record(loaded, gathered, probability, decisions=predictor.contract.decisions,
                               request_id="req-9", latency_s=0.012, role="challenger")
    answer = predictor.answer(loaded, record)

    tid, cid, mid = request.transaction_id, request.customer_id, request.merchant_id  # type: ignore[attr-defined]
    assert answer == {
        "transaction_id": tid, "request_id": "req-9", "probability": 0.75, "decision": "fraud",
        "threshold": THRESHOLD, "model_name": "fraud-test", "model_version": "7",
        "event_timestamp": WHEN.isoformat(), "unknown_entities": ["customer", "merchant"],
        "unknown_categories": ["merchant_category"], "retry": False, "features_exact": True,
    }
    assert (record.event_id, record.event_timestamp, record.request_id, record.latency_s, record.role) == (
        tid, WHEN, "req-9", 0.012, "challenger")
    assert (record.model_name, record.model_version, record.probability) == ("fraud-test", "7", 0.75)
    assert record.entities == {"customer_id": cid, "merchant_id": mid}
    assert record.inputs == {"amount": 0.75, "merchant_category": "casino", "channel": "pos", "country": "DE"}
    assert record.features == gathered.features
    assert set(record.features) == set(predictor.contract.feature_names)
    assert (record.unknown_entities, record.unknown_categories) == (["customer", "merchant"], ["merchant_category"])
    assert abs(record.logged_at - datetime.now(UTC)) < timedelta(minutes=1)
    assert prediction_record(loaded, gathered, probability, decisions=predictor.contract.decisions,
                             request_id="r", latency_s=None).role == "champion"


def test_a_known_customer_is_not_flagged_and_its_history_counts(
        predictor: Predictor, request_model: type[BaseModel]) -> None:
    first = _request(request_model, amount=0.2)
    _gather(predictor, first)
    customer = first.customer_id  # type: ignore[attr-defined]
    unknown_before = _counter(predictor, "mlops_unknown_entities_total", entity="merchant")

    later = _gather(predictor, _request(request_model, customer_id=customer,
                                        event_timestamp=WHEN + timedelta(minutes=1), amount=0.4, country="XX",
                                        channel="online"))

    assert later.unknown_entities == ["merchant"]
    assert later.unknown_categories == ["country"]
    assert later.entities["customer_id"] == customer
    assert (later.features["customer_txn_count_1h"], later.features["customer_amount_sum_24h"]) == (1.0, 0.2)
    assert later.features["customer_seconds_since_previous"] == 60.0
    assert later.features["merchant_txn_count_24h"] == 0.0
    assert _counter(predictor, "mlops_unknown_entities_total", entity="merchant") == unknown_before + 1


def test_a_retried_transaction_is_counted_once(predictor: Predictor, request_model: type[BaseModel]) -> None:
    first = _request(request_model)
    for _ in range(2):
        _gather(predictor, first)
    follow_up = _gather(predictor, _request(request_model, customer_id=first.customer_id,  # type: ignore[attr-defined]
                                          event_timestamp=WHEN + timedelta(seconds=5)))
    assert follow_up.features["customer_txn_count_1h"] == 1.0


def test_a_late_event_sees_only_earlier_events_and_a_retry_gets_the_first_answer(
        predictor: Predictor, loaded: LoadedModel, request_model: type[BaseModel]) -> None:
    first = _request(request_model, amount=0.5)
    customer = first.customer_id  # type: ignore[attr-defined]
    answered = _gather(predictor, first)
    late = _gather(predictor, _request(request_model, customer_id=customer, amount=0.25,
                                       event_timestamp=WHEN - timedelta(minutes=1)))
    assert (late.features["customer_txn_count_1h"], late.retry, late.features_exact) == (0.0, False, True)
    retries_before = _counter(predictor, "mlops_retried_events_total")

    retried = _gather(predictor, _request(request_model, transaction_id=first.transaction_id,  # type: ignore[attr-defined]
                                          customer_id=customer, amount=0.5, event_timestamp=None))

    assert (retried.retry, retried.event_timestamp, retried.features) == (True, WHEN, answered.features)
    assert _counter(predictor, "mlops_retried_events_total") == retries_before + 1
    [probability] = predictor.score(loaded, [retried])
    record = prediction_record(loaded, retried, probability, decisions=predictor.contract.decisions,
                               request_id="again", latency_s=None)
    assert record.role == "retry"  # logged beside the first answer, never counted as a second event
    assert predictor.answer(loaded, record)["retry"] is True
    after = _gather(predictor, _request(request_model, customer_id=customer,
                                        event_timestamp=WHEN + timedelta(minutes=1)))
    assert after.features["customer_txn_count_1h"] == 2.0  # the late event went in, the retry did not


def test_an_event_older_than_the_histories_reach_is_answered_flagged_and_counted(
        predictor: Predictor, request_model: type[BaseModel]) -> None:
    """The customer view reaches 7 days back and the default allowance is a day: 9 days late is beyond."""
    first = _request(request_model)
    customer = first.customer_id  # type: ignore[attr-defined]
    for moment in (WHEN, WHEN + timedelta(days=10)):
        _gather(predictor, _request(request_model, customer_id=customer, event_timestamp=moment))
    inexact_before = _counter(predictor, "mlops_inexact_features_total")

    within = _gather(predictor, _request(request_model, customer_id=customer,
                                         event_timestamp=WHEN + timedelta(days=9)))
    beyond = _gather(predictor, _request(request_model, customer_id=customer,
                                         event_timestamp=WHEN + timedelta(days=1)))

    assert (within.features_exact, beyond.features_exact) == (True, False)
    assert _counter(predictor, "mlops_inexact_features_total") == inexact_before + 1


def test_requests_gathered_together_see_each_other_in_order(
        predictor: Predictor, request_model: type[BaseModel]) -> None:
    """One event-loop turn's requests are gathered in one call: as if they came one after the other."""
    first = _request(request_model, amount=0.25)
    card = first.customer_id  # type: ignore[attr-defined]
    retried = first.model_copy()
    second = _request(request_model, customer_id=card, event_timestamp=WHEN + timedelta(seconds=30), amount=0.5)
    third = _request(request_model, customer_id=card, event_timestamp=WHEN + timedelta(seconds=90), amount=0.125)
    batch = [first, retried, second, third]

    gathered = predictor.gather(batch, predictor.event_times(batch))

    counts = [g.features["customer_txn_count_1h"] for g in gathered]
    sums = [g.features["customer_amount_sum_24h"] for g in gathered]
    assert counts == [0.0, 0.0, 1.0, 2.0]  # the retried id is recorded once
    assert sums == [0.0, 0.0, 0.25, 0.75]
    assert ["customer" in g.unknown_entities for g in gathered] == [True, True, False, False]
    assert _gather(predictor, _request(request_model, customer_id=card,
                                       event_timestamp=WHEN + timedelta(minutes=2))).features[
        "customer_txn_count_1h"] == 3.0


def test_the_requests_own_amount_is_compared_with_the_customers_window(
        contract: DataContract, tmp_path: Path) -> None:
    """ratio_to_mean and zscore take the amount the request carries, against the history before it."""
    import pandas as pd

    raw = contract.model_dump(mode="json")
    raw["feature_views"][0]["features"] += [
        {"name": "customer_amount_ratio_24h", "agg": "ratio_to_mean", "column": "amount", "window": "24h"},
        {"name": "customer_amount_zscore_7d", "agg": "zscore", "column": "amount", "window": "7d"}]
    scored = DataContract.model_validate(raw)
    settings = Settings(home=tmp_path)
    seed = {"transaction_id": "seed", "customer_id": "seed", "merchant_id": "seed", "event_timestamp": WHEN,
            "amount": 1.0}
    publish_features(pd.DataFrame([seed]), scored, settings)
    online = open_online_features(settings, scored)
    try:
        predictor = Predictor(scored, online, ServiceMetrics(), max_clock_skew=SKEW)
        request_model = build_request_model(scored)
        card = _request(request_model).customer_id  # type: ignore[attr-defined]
        batch = [_request(request_model, customer_id=card, event_timestamp=WHEN + timedelta(minutes=i), amount=a)
                 for i, a in enumerate((0.25, 0.75, 1.5))]
        gathered = predictor.gather(batch, predictor.event_times(batch))
    finally:
        online.close()
    assert [g.features["customer_amount_ratio_24h"] for g in gathered] == [1.0, 3.0, 3.0]  # 1.5 against {0.25, 0.75}
    assert [g.features["customer_amount_zscore_7d"] for g in gathered] == [0.0, 0.0, 4.0]  # mean 0.5, std 0.25


def test_a_card_meeting_a_merchant_again_is_no_longer_new(contract: DataContract, tmp_path: Path) -> None:
    """pair_seen and distinct_count read the request's merchant and channel, kept as text in the history."""
    import pandas as pd

    raw = contract.model_dump(mode="json")
    raw["feature_views"][0]["features"] += [
        {"name": "customer_met_merchant_7d", "agg": "pair_seen", "column": "merchant_id", "window": "7d"},
        {"name": "customer_merchant_gap_7d", "agg": "pair_seconds_since_previous", "column": "merchant_id",
         "window": "7d"},
        {"name": "customer_channels_1d", "agg": "distinct_count", "column": "channel", "window": "1d"}]
    paired = DataContract.model_validate(raw)
    settings = Settings(home=tmp_path)
    seed = {"transaction_id": "seed", "customer_id": "seed", "merchant_id": "seed", "event_timestamp": WHEN,
            "amount": 1.0, "channel": "pos"}
    publish_features(pd.DataFrame([seed]), paired, settings)
    online = open_online_features(settings, paired)
    try:
        predictor = Predictor(paired, online, ServiceMetrics(), max_clock_skew=SKEW)
        request_model = build_request_model(paired)
        card = _request(request_model).customer_id  # type: ignore[attr-defined]
        batch = [_request(request_model, customer_id=card, merchant_id=merchant, channel=channel,
                          event_timestamp=WHEN + timedelta(minutes=minute))
                 for minute, merchant, channel in ((0, "M1", "pos"), (1, "M2", "online"), (3, "M1", "pos"))]
        gathered = predictor.gather(batch, predictor.event_times(batch))
    finally:
        online.close()
    assert [g.features["customer_met_merchant_7d"] for g in gathered] == [0.0, 0.0, 1.0]
    assert [g.features["customer_merchant_gap_7d"] for g in gathered] == [604_800.0, 604_800.0, 180.0]
    assert [g.features["customer_channels_1d"] for g in gathered] == [0.0, 1.0, 2.0]


def test_score_counts_predictions_and_observes_each_probability(
        predictor: Predictor, loaded: LoadedModel, request_model: type[BaseModel]) -> None:
    rows = [_gather(predictor, _request(request_model, amount=a)) for a in (0.125, 0.625)]
    before = (_counter(predictor, "mlops_predictions_total"), _counter(predictor, "mlops_predicted_probability_sum"),
              _counter(predictor, "mlops_batch_size_count"))
    assert predictor.score(loaded, rows) == [0.125, 0.625]
    after = (_counter(predictor, "mlops_predictions_total"), _counter(predictor, "mlops_predicted_probability_sum"),
             _counter(predictor, "mlops_batch_size_count"))
    assert (after[0] - before[0], after[1] - before[1], after[2] - before[2]) == (2.0, 0.75, 1.0)


def test_the_timings_observed_are_the_calls_durations(
        predictor: Predictor, loaded: LoadedModel, request_model: type[BaseModel]) -> None:
    sums = ("mlops_feature_fetch_seconds_sum", "mlops_inference_seconds_sum")
    before = [_counter(predictor, name) for name in sums]
    predictor.score(loaded, [_gather(predictor, _request(request_model))])
    spent = [_counter(predictor, name) - start for name, start in zip(sums, before, strict=True)]
    assert all(0.0 < seconds < 10.0 for seconds in spent), spent


def test_event_time_rules(predictor: Predictor, request_model: type[BaseModel], berlin_clock: None) -> None:
    received = datetime.now(UTC)
    now = _gather(predictor, _request(request_model, event_timestamp=None)).event_timestamp
    assert now - received < timedelta(minutes=1)
    assert _gather(predictor, _request(request_model, event_timestamp=None)).event_timestamp >= received
    paris = WHEN.astimezone(timezone(timedelta(hours=1)))
    moment = _gather(predictor, _request(request_model, event_timestamp=paris)).event_timestamp
    assert (moment, moment.utcoffset()) == (WHEN, timedelta(0))
    # The allowed clock skew is inclusive: exactly max_clock_skew ahead of the receipt is accepted.
    at_limit = _request(request_model, event_timestamp=received + SKEW)
    assert predictor._event_time(at_limit, received) == received + SKEW
    with pytest.raises(InputError, match=r"event_timestamp .* lies more than 30 s in the future") as raised:
        predictor._event_time(at_limit, received - timedelta(microseconds=1))
    assert raised.value.field == "event_timestamp"
    with pytest.raises(InputError, match=r"event_timestamp 1969-12-31T23:59:59\+00:00 lies before 1970") as raised:
        _gather(predictor, _request(request_model, event_timestamp=datetime(1969, 12, 31, 23, 59, 59, tzinfo=UTC)))
    assert raised.value.field == "event_timestamp"
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    assert _gather(predictor, _request(request_model, event_timestamp=epoch)).event_timestamp == epoch


def test_an_integer_id_is_answered_as_the_integer_it_was_asked_as(loaded: LoadedModel, tmp_path: Path) -> None:
    """The terminal contract's ids are ints: they travel as text (the log, the store) and come back as ints."""
    import pandas as pd

    from mlops.contract import load_contract
    from mlops.contracts import BUNDLED_CONTRACT

    terminals = load_contract(BUNDLED_CONTRACT.parent / "terminals.yaml")
    settings = Settings(home=tmp_path)
    seed = {"TRANSACTION_ID": 1, "TX_DATETIME": WHEN, "CUSTOMER_ID": 1, "TERMINAL_ID": 1, "TX_AMOUNT": 1.0,
            "TX_FRAUD": 0}
    publish_features(pd.DataFrame([seed]), terminals, settings)
    online = open_online_features(settings, terminals)
    try:
        predictor = Predictor(terminals, online, ServiceMetrics(), max_clock_skew=SKEW)
        big = 2**53 + 1  # not exact as a float: the answer must not pass through one
        request = build_request_model(terminals).model_validate(
            {"TRANSACTION_ID": big, "TX_DATETIME": WHEN.isoformat(), "CUSTOMER_ID": 7, "TERMINAL_ID": 9,
             "TX_AMOUNT": 0.25})
        [gathered] = predictor.gather([request], predictor.event_times([request]))
    finally:
        online.close()
    record = prediction_record(loaded, gathered, 0.25, decisions=terminals.decisions, request_id="r", latency_s=None)
    answer = predictor.answer(loaded, record)
    assert (record.event_id, gathered.entities) == (str(big), {"CUSTOMER_ID": "7", "TERMINAL_ID": "9"})
    assert answer["TRANSACTION_ID"] == big
    assert type(answer["TRANSACTION_ID"]) is int
    assert answer["decision"] == "genuine"
