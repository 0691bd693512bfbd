"""The data contract: the bundled file loads, derived input specs are ordered, bad files fail by name."""

from __future__ import annotations

import copy
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from mlops.contract import DataContract, Decisions, FeatureSpec, FeatureViewSpec, load_contract
from mlops.contracts import BUNDLED_CONTRACT
from mlops.errors import ConfigError

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def raw() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(BUNDLED_CONTRACT.read_text())
    return data


def test_bundled_contract_loads(contract: DataContract) -> None:
    assert contract.name == "card-transactions"
    assert contract.id_column == "transaction_id"
    assert contract.timestamp_column == "event_timestamp"
    assert contract.label_column == "is_fraud"
    assert [e.join_key for e in contract.entities] == ["customer_id", "merchant_id"]
    assert contract.column("channel").categories == ("pos", "online", "atm", "contactless")
    assert contract.column("amount").min == 0.01
    assert contract.column("amount").max == 50000
    assert [v.view_name for v in contract.feature_views] == ["customer_history", "merchant_history"]
    # A history keeps the longest aggregating window; seconds_since_previous needs only the previous event.
    assert [v.history_horizon.days for v in contract.feature_views] == [7, 7]
    assert contract.feature_views[0].value_columns == ["amount"]


def test_the_decision_is_positive_at_and_above_the_threshold() -> None:
    # The one rule every scorer answers with (serving, the prediction log, batch scoring).
    named = Decisions(positive="fraud", negative="legit")
    assert [named.of(p, 0.5) for p in (0.4999, 0.5, 0.5001, 1.0, 0.0)] == ["legit", "fraud", "fraud", "fraud", "legit"]
    assert [Decisions().of(p, 0.0) for p in (-0.1, 0.0)] == ["negative", "positive"]


def test_window_delta_parses_units(contract: DataContract) -> None:
    windows = {f.name: f.window_delta.total_seconds() for v in contract.feature_views for f in v.features}
    assert windows["customer_txn_count_1h"] == 3600
    assert windows["customer_txn_count_24h"] == 86400
    assert windows["customer_amount_mean_7d"] == 7 * 86400


def test_numeric_inputs_are_raw_fields_then_features(contract: DataContract) -> None:
    assert contract.numeric_inputs == [
        "amount",
        "customer_txn_count_1h",
        "customer_txn_count_24h",
        "customer_amount_mean_7d",
        "customer_amount_max_24h",
        "customer_amount_sum_24h",
        "customer_amount_ratio_7d",
        "customer_seconds_since_previous",
        "merchant_txn_count_24h",
        "merchant_amount_mean_7d",
        "merchant_seconds_since_previous",
        "hour_of_day_sin",
        "hour_of_day_cos",
        "day_of_week_sin",
        "day_of_week_cos",
    ]
    assert contract.feature_names == contract.numeric_inputs[1:]


def test_log1p_mask_marks_amount_and_amount_features(contract: DataContract) -> None:
    assert contract.log1p_mask == [True, False, False, True, True, True, True, True, False, True, True,
                                   False, False, False, False]
    assert len(contract.log1p_mask) == len(contract.numeric_inputs)


def test_request_fields_are_the_raw_inputs_without_the_label(contract: DataContract) -> None:
    assert contract.request_fields == [
        "transaction_id",
        "customer_id",
        "merchant_id",
        "event_timestamp",
        "amount",
        "merchant_category",
        "channel",
        "country",
    ]
    assert contract.label_column not in contract.request_fields


def test_unknown_column_lookup_raises_key_error(contract: DataContract) -> None:
    with pytest.raises(KeyError, match="nope"):
        contract.column("nope")
    with pytest.raises(KeyError, match="nowhere"):
        contract.entity("nowhere")


def _write(tmp_path: Path, data: dict[str, Any]) -> Path:
    path = tmp_path / "contract.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_round_tripped_bundled_yaml_still_loads(tmp_path: Path, raw: dict[str, Any],
                                                 contract: DataContract) -> None:
    assert load_contract(_write(tmp_path, copy.deepcopy(raw))) == contract


def test_missing_file_raises_config_error(tmp_path: Path) -> None:
    missing = tmp_path / "absent.yaml"
    with pytest.raises(ConfigError, match="not found") as info:
        load_contract(missing)
    assert str(missing) in info.value.message


def test_invalid_yaml_raises_config_error(tmp_path: Path) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text("name: [unclosed\ncolumns: {\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_contract(path)


def _undeclared_feature_column(data: dict[str, Any]) -> None:
    data["feature_views"][0]["features"][2]["column"] = "balance"


def _undeclared_model_input(data: dict[str, Any]) -> None:
    data["model_inputs"]["numeric"].append({"name": "velocity"})


def _categories_on_float(data: dict[str, Any]) -> None:
    data["columns"][4]["categories"] = ["a", "b"]


def _category_without_categories(data: dict[str, Any]) -> None:
    del data["columns"][6]["categories"]


def _duplicate_feature(data: dict[str, Any]) -> None:
    data["feature_views"][1]["features"][0]["name"] = "customer_txn_count_24h"


def _feature_named_like_column(data: dict[str, Any]) -> None:
    data["feature_views"][1]["features"][0]["name"] = "amount"


def _unknown_top_level_field(data: dict[str, Any]) -> None:
    data["owner"] = "someone"


def _unknown_column_field(data: dict[str, Any]) -> None:
    data["columns"][4]["unit"] = "EUR"


def _undeclared_entity(data: dict[str, Any]) -> None:
    data["feature_views"][1]["entity"] = "terminal"


def _bad_window(data: dict[str, Any]) -> None:
    data["feature_views"][0]["features"][0]["window"] = "1w"


def _mean_without_column(data: dict[str, Any]) -> None:
    del data["feature_views"][0]["features"][2]["column"]


def _unknown_log1p_feature(data: dict[str, Any]) -> None:
    data["model_inputs"]["log1p_features"].append("customer_amount_median_7d")


def _categorical_input_not_category(data: dict[str, Any]) -> None:
    data["model_inputs"]["categorical"].append("customer_id")


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (_undeclared_feature_column, r"undeclared columns: \['balance'\]"),
        (_undeclared_model_input, r"undeclared columns: \['velocity'\]"),
        (_categories_on_float, r"column 'amount': categories are required for, and only for"),
        (_category_without_categories, r"column 'channel': categories are required for"),
        (_duplicate_feature, r"feature names must be unique.*customer_txn_count_24h"),
        (_feature_named_like_column, r"feature names must be unique.*'amount'"),
        (_unknown_top_level_field, r"owner: Extra inputs are not permitted"),
        (_unknown_column_field, r"columns\.\d+\.unit: Extra inputs are not permitted"),
        (_undeclared_entity, r"undeclared entities: \['terminal'\]"),
        (_bad_window, r"features\.\d+\.window: String should match pattern"),
        (_mean_without_column, r"feature 'customer_amount_mean_7d': aggregation 'mean' needs a column"),
        (_unknown_log1p_feature, r"log1p_features names unknown features: \['customer_amount_median_7d'\]"),
        (_categorical_input_not_category, r"categorical model input 'customer_id' is not a category column"),
    ],
)
def test_bad_contract_raises_config_error_naming_problem(
    tmp_path: Path, raw: dict[str, Any], mutate: Callable[[dict[str, Any]], None], expected: str
) -> None:
    data = copy.deepcopy(raw)
    mutate(data)
    path = _write(tmp_path, data)
    with pytest.raises(ConfigError, match=expected) as info:
        load_contract(path)
    assert str(path) in info.value.message
    assert "\n" not in info.value.message  # one line, each of pydantic's errors as field: message
    assert info.value.exit_code == 2


def test_a_bad_contract_names_the_field_of_its_first_error(tmp_path: Path, raw: dict[str, Any]) -> None:
    """The error carries the field's path apart from the message (the API's JSON body shows it as
    ``field``); an error of the whole contract names none."""
    data = copy.deepcopy(raw)
    _unknown_column_field(data)
    with pytest.raises(ConfigError) as info:
        load_contract(_write(tmp_path, data))
    assert info.value.field == "columns.4.unit"
    whole = copy.deepcopy(raw)
    _undeclared_entity(whole)
    with pytest.raises(ConfigError) as info:
        load_contract(_write(tmp_path, whole))
    assert info.value.field is None


def test_contract_is_frozen(contract: DataContract) -> None:
    with pytest.raises(ValueError, match="frozen"):
        contract.min_rows = 1  # type: ignore[misc]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda raw: raw["columns"].append({"name": "amount", "dtype": "string"}), "declared more than once"),
        (lambda raw: raw["label_rate"].update({"min": 0.5, "max": 0.1}), "min 0.5 is greater than max 0.1"),
        (lambda raw: raw["columns"][4].update({"min": 10, "max": 1}), "min 10.0 is greater than max 1.0"),
        (lambda raw: raw["columns"][4].update({"true_values": ["y"], "false_values": ["n"]}),
         "column 'amount': true_values/false_values need dtype int with min 0, max 1"),
        (lambda raw: raw["columns"][8].update({"false_values": []}), "give both true_values and false_values"),
        (lambda raw: raw["columns"][8].update({"true_values": ["Yes"], "false_values": ["yes"]}),
         r"listed as both true and false: \['yes'\]"),
        # A bare YAML true is a boolean, not a spelling: the contract must quote it.
        (lambda raw: raw["columns"][8].update({"true_values": [True]}), "Input should be a valid string"),
        (lambda raw: raw.update({"behaviour": {"invariant": ["transaction_id", "card_pin"]}}),
         r"behaviour.invariant names undeclared columns: \['card_pin'\]"),
    ],
)
def test_inconsistent_contracts_are_rejected(
    tmp_path: Path, change: Callable[[dict[str, Any]], None], message: str
) -> None:
    raw = yaml.safe_load(BUNDLED_CONTRACT.read_text())
    change(raw)
    path = tmp_path / "contract.yaml"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(ConfigError, match=message):
        load_contract(path)


def test_hygiene_rules_of_the_bundled_contract(contract: DataContract) -> None:
    assert [c.name for c in contract.columns if c.unique] == [contract.id_column]
    assert not contract.allow_duplicate_rows
    label = contract.column(contract.label_column)
    assert "true" in label.true_values
    assert "false" in label.false_values


def test_label_features_need_a_delay_and_only_they_take_one() -> None:
    def feature(**fields: Any) -> FeatureSpec:
        return FeatureSpec(name="f", window="7d", **fields)

    rate = feature(agg="label_rate", delay="1d")
    assert (rate.is_label, rate.delay_delta, feature(agg="count").delay_delta) == (True, timedelta(days=1),
                                                                                   timedelta(0))
    for fields, message in (({"agg": "label_count"}, "'label_count' needs a delay"),
                            ({"agg": "count", "delay": "1d"}, "'count' takes no delay"),
                            ({"agg": "label_count", "delay": "1d", "column": "amount"}, "takes no column"),
                            ({"agg": "label_rate", "delay": "0d"}, "String should match pattern")):
        with pytest.raises(ValueError, match=message):
            feature(**fields)
    view = FeatureViewSpec(entity="customer", features=(feature(agg="count"), rate))
    assert (view.history_horizon, view.uses_labels) == (timedelta(days=8), True)  # the delay plus the window
    raw = yaml.safe_load(BUNDLED_CONTRACT.read_text())
    raw["feature_views"][0]["features"] += [{"name": "fraud_rate", "agg": "label_rate", "window": "7d", "delay": "1d"},
                                            {"name": "frauds", "agg": "label_count", "window": "7d", "delay": "1d"}]
    bounds = DataContract.model_validate(raw).feature_bounds
    assert (bounds["fraud_rate"], bounds["frauds"]) == ((0.0, 1.0), (0.0, None))


def test_current_value_features_compare_a_raw_numeric_request_input() -> None:
    raw = yaml.safe_load(BUNDLED_CONTRACT.read_text())
    features = [f for f in raw["feature_views"][0]["features"] if f["agg"] not in ("ratio_to_mean", "zscore")]
    dropped = {f["name"] for f in raw["feature_views"][0]["features"]} - {f["name"] for f in features}
    raw["model_inputs"]["log1p_features"] = [n for n in raw["model_inputs"]["log1p_features"] if n not in dropped]

    def validated(feature: dict[str, Any], **column: Any) -> DataContract:
        changed = copy.deepcopy(raw)
        changed["feature_views"][0]["features"] = [*features, feature]
        changed["columns"] = [{**c, **column} if c["name"] == "amount" else c for c in changed["columns"]]
        return DataContract.model_validate(changed)

    ratio = {"name": "amount_ratio", "agg": "ratio_to_mean", "column": "amount", "window": "1d"}
    zscore = {"name": "amount_z", "agg": "zscore", "column": "amount", "window": "7d"}
    contract = validated(ratio)
    view = contract.feature_views[0]
    assert (view.current_value_columns, view.features[-1].uses_current_value) == (["amount"], True)
    assert contract.feature_bounds["amount_ratio"] == (0.0, None)
    assert validated(zscore, min=-5.0).feature_bounds["amount_z"] == (None, None)  # a z-score takes any sign
    with pytest.raises(ValueError, match="ratio_to_mean needs a column that is never negative"):
        validated(ratio, min=-5.0)
    with pytest.raises(ValueError, match="needs a column"):
        validated({**zscore, "column": None})
    # The label is declared but no request carries it: a feature cannot compare "the current label".
    with pytest.raises(ValueError, match="'is_fraud', so it must be a raw numeric model input"):
        validated({**zscore, "column": "is_fraud"})


def test_novelty_features_read_a_key_like_column_the_request_carries() -> None:
    raw = yaml.safe_load(BUNDLED_CONTRACT.read_text())
    features = raw["feature_views"][0]["features"]

    def validated(*added: dict[str, Any]) -> DataContract:
        changed = copy.deepcopy(raw)
        changed["feature_views"][0]["features"] = [*features, *added]
        return DataContract.model_validate(changed)

    distinct = {"name": "merchants_1d", "agg": "distinct_count", "column": "merchant_id", "window": "1d"}
    seen = {"name": "met_merchant_7d", "agg": "pair_seen", "column": "merchant_id", "window": "7d"}
    gap = {"name": "channel_gap_1h", "agg": "pair_seconds_since_previous", "column": "channel", "window": "1h"}
    contract = validated(distinct, seen, gap)
    view = contract.feature_views[0]
    assert (view.text_columns, view.value_columns) == (["channel", "merchant_id"], ["amount"])
    # a distinct count needs no current value; amount is the bundled ratio feature's
    assert view.current_value_columns == ["amount", "channel", "merchant_id"]
    assert view.history_horizon == timedelta(days=7)
    bounds = contract.feature_bounds
    assert (bounds["merchants_1d"], bounds["met_merchant_7d"], bounds["channel_gap_1h"]) == (
        (0.0, None), (0.0, 1.0), (0.0, 3600.0))
    for column in ("amount", "is_fraud", "transaction_id"):  # a float; the label and the id no request input
        with pytest.raises(ValueError, match=f"needs a key-like column the request carries.*'{column}' is not"):
            validated({**seen, "column": column})
    with pytest.raises(ValueError, match="needs a column"):
        validated({**distinct, "column": None})
