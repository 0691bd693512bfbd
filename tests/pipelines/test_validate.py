"""The contract-derived GX suite: valid data passes; each kind of broken data fails by name."""

from __future__ import annotations

import html
import json
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest

from mlops.contract import DataContract
from mlops.data.generator import generate_transactions
from mlops.data.ingest import ingest
from mlops.errors import DataValidationError, InputError
from pipelines.steps.validate import (
    HTML_NAME,
    JSON_NAME,
    ValidationReport,
    check_snapshot,
    failure_summary,
    log_validation_to_mlflow,
    suite_plan,
    validate_snapshot,
)

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def clean() -> pd.DataFrame:
    frame: pd.DataFrame = generate_transactions(2000, seed=1)
    return frame


def _snapshot(frame: pd.DataFrame, tmp_path: Path) -> Path:
    path = tmp_path / "data.parquet"
    frame.to_parquet(path, index=False)
    return path


def _drop_amount(df: pd.DataFrame) -> pd.DataFrame:
    return df.drop(columns=["amount"])


def _null_customers(df: pd.DataFrame) -> pd.DataFrame:
    df.loc[df.index[:5], "customer_id"] = None
    return df


def _amount_out_of_range(df: pd.DataFrame) -> pd.DataFrame:
    df.loc[df.index[:3], "amount"] = -5.0
    df.loc[df.index[3:6], "amount"] = 1e9
    return df


def _casino_merchants(df: pd.DataFrame) -> pd.DataFrame:
    df.loc[df.index[: len(df) // 100], "merchant_category"] = "casino"  # 1% >> 0.1% tolerance
    return df


def _no_fraud(df: pd.DataFrame) -> pd.DataFrame:
    df["is_fraud"] = 0  # label rate 0 < label_rate.min
    return df


def _exact_duplicates(df: pd.DataFrame) -> pd.DataFrame:
    return pd.concat([df, df.iloc[100:104]], ignore_index=True)  # a batch appended twice


def _reused_ids(df: pd.DataFrame) -> pd.DataFrame:
    df.loc[df.index[200:203], "transaction_id"] = df["transaction_id"].iloc[199]  # different rows, one id
    return df


REUSED_IDS = "expect_column_values_to_be_unique(column=transaction_id)"
DUPLICATE_ROWS = "expect_compound_columns_to_be_unique()"

# The suite contracts/fraud.yaml implies, written out by hand (not by suite_plan): the contract's
# rules, column by column, in report order.
_INTS = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
         "Int8Dtype", "Int16Dtype", "Int32Dtype", "Int64Dtype"]
_FLOATS = [*_INTS, "float32", "float64", "Float32Dtype", "Float64Dtype"]
_STRINGS = ["str", "StringDtype"]
_CATEGORY_TOLERANCE = 1.0 - 0.001
EXPECTED_SUITE: list[tuple[str, dict[str, object]]] = [
    ("expect_table_row_count_to_be_between", {"min_value": 500}),
    ("expect_column_to_exist", {"column": "transaction_id"}),
    ("expect_column_values_to_not_be_null", {"column": "transaction_id"}),
    ("expect_column_values_to_be_in_type_list", {"column": "transaction_id", "type_list": _STRINGS}),
    ("expect_column_values_to_be_unique", {"column": "transaction_id"}),
    ("expect_column_to_exist", {"column": "customer_id"}),
    ("expect_column_values_to_not_be_null", {"column": "customer_id"}),
    ("expect_column_values_to_be_in_type_list", {"column": "customer_id", "type_list": _STRINGS}),
    ("expect_column_to_exist", {"column": "merchant_id"}),
    ("expect_column_values_to_not_be_null", {"column": "merchant_id"}),
    ("expect_column_values_to_be_in_type_list", {"column": "merchant_id", "type_list": _STRINGS}),
    ("expect_column_to_exist", {"column": "event_timestamp"}),
    ("expect_column_values_to_not_be_null", {"column": "event_timestamp"}),
    ("expect_column_values_to_be_of_type", {"column": "event_timestamp", "type_": "Timestamp"}),
    ("expect_column_to_exist", {"column": "amount"}),
    ("expect_column_values_to_not_be_null", {"column": "amount"}),
    ("expect_column_values_to_be_in_type_list", {"column": "amount", "type_list": _FLOATS}),
    ("expect_column_values_to_be_between", {"column": "amount", "min_value": 0.01, "max_value": 50000,
                                            "mostly": 1.0}),
    ("expect_column_to_exist", {"column": "merchant_category"}),
    ("expect_column_values_to_not_be_null", {"column": "merchant_category"}),
    ("expect_column_values_to_be_in_set", {"column": "merchant_category", "mostly": _CATEGORY_TOLERANCE,
                                           "value_set": ["grocery", "restaurant", "fuel", "travel", "electronics",
                                                         "fashion", "entertainment", "gift_cards", "health",
                                                         "utilities"]}),
    ("expect_column_to_exist", {"column": "channel"}),
    ("expect_column_values_to_not_be_null", {"column": "channel"}),
    ("expect_column_values_to_be_in_set", {"column": "channel", "mostly": _CATEGORY_TOLERANCE,
                                           "value_set": ["pos", "online", "atm", "contactless"]}),
    ("expect_column_to_exist", {"column": "country"}),
    ("expect_column_values_to_not_be_null", {"column": "country"}),
    ("expect_column_values_to_be_in_set", {"column": "country", "mostly": _CATEGORY_TOLERANCE,
                                           "value_set": ["US", "GB", "DE", "FR", "ES", "IT", "NL", "CA", "BR", "NG",
                                                         "RU", "CN", "IN", "MX"]}),
    ("expect_column_to_exist", {"column": "is_fraud"}),
    ("expect_column_values_to_not_be_null", {"column": "is_fraud"}),
    ("expect_column_values_to_be_in_type_list", {"column": "is_fraud", "type_list": _INTS}),
    ("expect_column_values_to_be_between", {"column": "is_fraud", "min_value": 0, "max_value": 1, "mostly": 1.0}),
    ("expect_compound_columns_to_be_unique", {"column_list": [
        "transaction_id", "customer_id", "merchant_id", "event_timestamp", "amount", "merchant_category",
        "channel", "country", "is_fraud"]}),
    ("expect_column_mean_to_be_between", {"column": "is_fraud", "min_value": 0.003, "max_value": 0.08}),
]


def test_valid_snapshot_passes_and_writes_report(
    contract: DataContract, clean: pd.DataFrame, tmp_path: Path
) -> None:
    report_dir = tmp_path / "reports" / "validate"  # not there yet: the step creates it
    report = validate_snapshot(_snapshot(clean, tmp_path), contract, report_dir)
    assert report.success
    assert report.rows == len(clean)
    assert report.failed == []
    assert report.report_path == str(report_dir / JSON_NAME)
    assert ValidationReport.model_validate_json((report_dir / JSON_NAME).read_text()) == report
    assert [(r.expectation, r.column) for r in report.results] == [
        (kind, kwargs.get("column")) for kind, kwargs in EXPECTED_SUITE]
    assert "FAIL" not in (report_dir / HTML_NAME).read_text()


@pytest.mark.parametrize(
    ("corrupt", "expected"),
    [
        (_drop_amount, "expect_column_to_exist(column=amount)"),
        (_null_customers, "expect_column_values_to_not_be_null(column=customer_id)"),
        (_amount_out_of_range, "expect_column_values_to_be_between(column=amount)"),
        (_casino_merchants, "expect_column_values_to_be_in_set(column=merchant_category)"),
        (_no_fraud, "expect_column_mean_to_be_between(column=is_fraud)"),
        (_exact_duplicates, DUPLICATE_ROWS),
        (_reused_ids, REUSED_IDS),
    ],
    ids=["missing-column", "nulls", "out-of-range", "unknown-category", "label-rate", "duplicate-rows",
         "reused-ids"],
)
def test_corrupted_snapshot_fails_naming_the_expectation(
    contract: DataContract,
    clean: pd.DataFrame,
    tmp_path: Path,
    corrupt: Callable[[pd.DataFrame], pd.DataFrame],
    expected: str,
) -> None:
    report_dir = tmp_path / "report"
    with pytest.raises(DataValidationError) as info:
        validate_snapshot(_snapshot(corrupt(clean.copy()), tmp_path), contract, report_dir)
    err = info.value
    assert expected in err.failed
    assert err.message == "data validation failed: " + failure_summary(ValidationReport.model_validate_json(
        Path(str(err.report_path)).read_text()))
    assert err.report_path == str(report_dir / JSON_NAME)
    report = ValidationReport.model_validate_json(Path(err.report_path).read_text())
    assert not report.success
    assert report.failed == err.failed
    page = (report_dir / HTML_NAME).read_text()
    assert page.count('class="fail"') == len(err.failed)


def test_missing_column_does_not_crash_other_checks(
    contract: DataContract, clean: pd.DataFrame, tmp_path: Path
) -> None:
    with pytest.raises(DataValidationError) as info:
        validate_snapshot(_snapshot(_drop_amount(clean.copy()), tmp_path), contract, tmp_path / "r")
    # Every failure concerns the missing column; the rest of the suite still ran and passed.
    report = ValidationReport.model_validate_json(Path(str(info.value.report_path)).read_text())
    assert all(r.column == "amount" or "amount" in r.observed for r in report.results if not r.success)
    between = next(r for r in report.results if r.expectation == "expect_column_values_to_be_between"
                   and r.column == "amount")
    assert between.observed == "not checked: column amount is missing"
    assert info.value.message == "data validation failed: column amount is missing"
    assert sum(r.success for r in report.results) == len(report.results) - len(info.value.failed)


@pytest.mark.parametrize(
    ("corrupt", "finding", "observed"),
    [(_exact_duplicates, DUPLICATE_ROWS, "8 rows are exact duplicates"),
     (_reused_ids, REUSED_IDS, "4 rows reuse an id of a different row")],
    ids=["duplicate-rows", "reused-ids"],
)
def test_duplicate_rows_and_reused_ids_are_distinct_findings(
    contract: DataContract, clean: pd.DataFrame, tmp_path: Path,
    corrupt: Callable[[pd.DataFrame], pd.DataFrame], finding: str, observed: str,
) -> None:
    with pytest.raises(DataValidationError) as info:
        validate_snapshot(_snapshot(corrupt(clean.copy()), tmp_path), contract, tmp_path / "r")
    assert info.value.failed == [finding]  # the other of the two stays quiet
    report = ValidationReport.model_validate_json(Path(str(info.value.report_path)).read_text())
    result = next(r for r in report.results if r.label == finding)
    assert result.observed.startswith(observed)


@pytest.mark.parametrize(
    ("corrupt", "message"),
    [(_amount_out_of_range, "column amount: expected between 0.01 and 50,000, observed 6 values outside the range "
                            "(0.3%), e.g. -5, 1,000,000,000"),
     (_null_customers, "column customer_id: expected no nulls, observed 5 nulls (0.25%)"),
     (_casino_merchants, "column merchant_category: expected one of grocery, restaurant, fuel, travel, electronics, "
                         "fashion, entertainment, gift_cards, health, utilities (up to 0.1% others), observed 20 "
                         "values not among them (1%), e.g. casino"),
     (_no_fraud, "column is_fraud: expected mean between 0.003 and 0.08, observed mean 0"),
     (_reused_ids, "column transaction_id: expected no id shared by rows that differ, observed 4 rows reuse an id "
                   "of a different row (0.2%), e.g. T000000199")],
    ids=["out-of-range", "nulls", "unknown-category", "label-rate", "reused-ids"],
)
def test_a_failure_says_what_the_contract_expects_and_what_the_data_holds(
    contract: DataContract, clean: pd.DataFrame, tmp_path: Path,
    corrupt: Callable[[pd.DataFrame], pd.DataFrame], message: str,
) -> None:
    with pytest.raises(DataValidationError) as info:
        validate_snapshot(_snapshot(corrupt(clean.copy()), tmp_path), contract, tmp_path / "r")
    assert info.value.message == f"data validation failed: {message}"
    page = (tmp_path / "r" / HTML_NAME).read_text()
    assert "<th>expected</th><th>observed</th>" in page
    assert html.escape(message.split(": ", 1)[1].split(", observed ")[0].removeprefix("expected ")) in page


def test_both_kinds_of_duplicate_are_both_reported(
    contract: DataContract, clean: pd.DataFrame, tmp_path: Path
) -> None:
    with pytest.raises(DataValidationError) as info:
        validate_snapshot(_snapshot(_exact_duplicates(_reused_ids(clean.copy())), tmp_path), contract,
                          tmp_path / "r")
    assert info.value.failed == [REUSED_IDS, DUPLICATE_ROWS]


def test_contract_may_allow_duplicate_rows(contract: DataContract, clean: pd.DataFrame, tmp_path: Path) -> None:
    lenient = contract.model_copy(update={"allow_duplicate_rows": True})
    assert all(kind != "expect_compound_columns_to_be_unique" for kind, _ in suite_plan(lenient))
    report = validate_snapshot(_snapshot(_exact_duplicates(clean.copy()), tmp_path), lenient, tmp_path / "r")
    assert report.success


def test_empty_source_fails_on_row_count(contract: DataContract, tmp_path: Path) -> None:
    source = tmp_path / "empty.csv"
    source.write_text("")
    snapshot = ingest(str(source), tmp_path / "snapshots", contract)
    assert snapshot.rows == 0
    with pytest.raises(DataValidationError) as info:
        validate_snapshot(snapshot.path, contract, tmp_path / "report")
    assert "expect_table_row_count_to_be_between()" in info.value.failed


def test_unknown_categories_within_tolerance_pass(
    contract: DataContract, clean: pd.DataFrame, tmp_path: Path
) -> None:
    df = clean.copy()
    df.loc[df.index[0], "merchant_category"] = "casino"  # 1 of 2000 = 0.05% < 0.1% tolerance
    report = validate_snapshot(_snapshot(df, tmp_path), contract, tmp_path / "report")
    in_set = next(r for r in report.results if r.expectation == "expect_column_values_to_be_in_set"
                  and r.column == "merchant_category")
    assert in_set.success
    assert "casino" in in_set.observed


def test_suite_follows_the_contract(contract: DataContract, clean: pd.DataFrame, tmp_path: Path) -> None:
    relaxed = contract.model_copy(update={"columns": tuple(
        c.model_copy(update={"nullable": True}) if c.name == "customer_id" else c for c in contract.columns
    )})
    plan = suite_plan(relaxed)
    assert ("expect_column_values_to_not_be_null", {"column": "customer_id"}) not in plan
    report = validate_snapshot(_snapshot(_null_customers(clean.copy()), tmp_path), relaxed, tmp_path / "r")
    assert report.success


def test_missing_snapshot_is_an_input_error(contract: DataContract, tmp_path: Path) -> None:
    with pytest.raises(InputError, match="snapshot not found"):
        validate_snapshot(tmp_path / "nope.parquet", contract, tmp_path / "report")


def test_log_validation_to_mlflow(
    contract: DataContract, clean: pd.DataFrame, tmp_path: Path, mlflow_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mlflow.tracking import MlflowClient

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{mlflow_home}/mlflow.db")
    report = validate_snapshot(_snapshot(clean, tmp_path), contract, tmp_path / "report")
    client = MlflowClient()
    # An explicit artifact location keeps MLflow from writing ./mlartifacts into the working tree.
    experiment_id = client.create_experiment("validate", artifact_location=(tmp_path / "artifacts").as_uri())
    run_id = client.create_run(experiment_id).info.run_id

    log_validation_to_mlflow(report, run_id)

    logged = sorted(a.path for a in client.list_artifacts(run_id, "validation"))
    assert logged == [f"validation/{HTML_NAME}", f"validation/{JSON_NAME}"]
    metrics = client.get_run(run_id).data.metrics
    assert metrics["validation_success"] == 1.0
    assert metrics["validation_expectations"] == len(EXPECTED_SUITE)  # 33
    local = Path(client.download_artifacts(run_id, f"validation/{JSON_NAME}", str(tmp_path / "dl")))
    assert json.loads(local.read_text())["success"] is True


def test_true_false_labels_pass_only_by_the_contract_rule(
    contract: DataContract, clean: pd.DataFrame, tmp_path: Path
) -> None:
    source = tmp_path / "labels.csv"
    clean.assign(is_fraud=clean["is_fraud"].map({1: "True", 0: "False"})).to_csv(source, index=False)
    snapshot = ingest(str(source), tmp_path / "snapshots", contract)
    assert validate_snapshot(snapshot.path, contract, tmp_path / "with-rule").success
    without_rule = contract.model_copy(update={"columns": tuple(
        c.model_copy(update={"true_values": (), "false_values": ()}) if c.name == "is_fraud" else c
        for c in contract.columns)})
    snapshot = ingest(str(source), tmp_path / "snapshots-without-rule", without_rule)
    with pytest.raises(DataValidationError) as info:
        validate_snapshot(snapshot.path, without_rule, tmp_path / "without-rule")
    assert info.value.failed == ["expect_column_values_to_be_in_type_list(column=is_fraud)"]


def test_suite_is_the_contract_written_out(contract: DataContract) -> None:
    assert suite_plan(contract) == EXPECTED_SUITE


@pytest.mark.parametrize("open_side", ["min", "max"])
def test_a_bound_on_one_side_is_still_checked(contract: DataContract, open_side: str) -> None:
    one_sided = contract.model_copy(update={"columns": tuple(
        c.model_copy(update={open_side: None}) if c.name == "amount" else c for c in contract.columns)})
    bounds = {"min_value": 0.01, "max_value": 50000, "mostly": 1.0} | {f"{open_side}_value": None}
    ranges = [kwargs for kind, kwargs in suite_plan(one_sided)
              if kind == "expect_column_values_to_be_between" and kwargs["column"] == "amount"]
    assert ranges == [{"column": "amount", **bounds}]


def _null_in(column: str) -> Callable[[pd.DataFrame], pd.DataFrame]:
    def corrupt(df: pd.DataFrame) -> pd.DataFrame:
        df.loc[df.index[7], column] = None
        return df
    return corrupt


@pytest.mark.parametrize(
    "column",
    ["transaction_id", "event_timestamp", "amount", "merchant_category", "is_fraud"],
    ids=["string", "datetime", "float", "category", "int-label"],
)
def test_one_null_fails_in_every_column_type(
    contract: DataContract, clean: pd.DataFrame, tmp_path: Path, column: str
) -> None:
    with pytest.raises(DataValidationError) as info:
        validate_snapshot(_snapshot(_null_in(column)(clean.copy()), tmp_path), contract, tmp_path / "r")
    assert f"expect_column_values_to_not_be_null(column={column})" in info.value.failed


def test_label_two_fails_the_label_range(contract: DataContract, clean: pd.DataFrame, tmp_path: Path) -> None:
    df = clean.copy()
    df.loc[df.index[11], "is_fraud"] = 2  # one row in 2,000: the mean stays inside the label rate
    with pytest.raises(DataValidationError) as info:
        validate_snapshot(_snapshot(df, tmp_path), contract, tmp_path / "r")
    assert info.value.failed == ["expect_column_values_to_be_between(column=is_fraud)"]


def test_nan_fails_in_a_column_without_bounds(contract: DataContract, clean: pd.DataFrame, tmp_path: Path) -> None:
    unbounded = contract.model_copy(update={"columns": tuple(
        c.model_copy(update={"min": None, "max": None}) if c.name == "amount" else c for c in contract.columns)})
    assert all(kind != "expect_column_values_to_be_between" or kwargs["column"] != "amount"
               for kind, kwargs in suite_plan(unbounded))
    df = clean.copy()
    df.loc[df.index[:3], "amount"] = float("nan")
    with pytest.raises(DataValidationError) as info:
        validate_snapshot(_snapshot(df, tmp_path), unbounded, tmp_path / "r")
    assert info.value.failed == ["expect_column_values_to_not_be_null(column=amount)"]


def _corrupted_everywhere(df: pd.DataFrame) -> pd.DataFrame:
    """Findings of every kind, spread so that each batch of 700 rows sees some and misses others."""
    df = _amount_out_of_range(_null_customers(df))
    df.loc[df.index[1500], "transaction_id"] = df["transaction_id"].iloc[10]  # a reuse across batches
    df.loc[df.index[1700:1703], "merchant_category"] = "casino"
    return pd.concat([df, df.iloc[[5, 1999]]], ignore_index=True)  # duplicates of a first and a last batch's rows


def test_batches_combine_to_the_verdict_on_the_whole_file(
    contract: DataContract, clean: pd.DataFrame, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pipelines.steps import validate_batches

    snapshot = _snapshot(_corrupted_everywhere(clean.copy()), tmp_path)
    whole = check_snapshot(snapshot, contract, tmp_path / "whole")
    monkeypatch.setattr(validate_batches, "BATCH_ROWS", 700)
    batched = check_snapshot(snapshot, contract, tmp_path / "batched")
    assert [r.model_dump() for r in batched.results] == [r.model_dump() for r in whole.results]
    assert batched.failed == [
        REUSED_IDS, "expect_column_values_to_not_be_null(column=customer_id)",
        "expect_column_values_to_be_between(column=amount)",
        "expect_column_values_to_be_in_set(column=merchant_category)", DUPLICATE_ROWS]
    found = {r.label: r.observed for r in batched.results}
    assert found[REUSED_IDS].startswith("2 rows reuse an id of a different row")  # exact across batches
    assert found[DUPLICATE_ROWS].startswith("4 rows are exact duplicates")
