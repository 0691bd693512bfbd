"""Validate a snapshot against its data contract with a Great Expectations suite; fail closed.

The suite is derived from the contract alone (see :func:`suite_plan`), so another dataset is only
another contract file. Every run writes ``validation.json`` and ``validation.html`` to the report
directory, pass or fail; a failure then raises :class:`DataValidationError` naming each failed
expectation. GX runs in an ephemeral context: no project files, no network.
"""

from __future__ import annotations

import html
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd
from pydantic import BaseModel, ConfigDict

from mlops.contract import DataContract, Dtype
from mlops.errors import DataValidationError, InputError

JSON_NAME = "validation.json"
HTML_NAME = "validation.html"

_INTS = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
         "Int8Dtype", "Int16Dtype", "Int32Dtype", "Int64Dtype"]
# GX's pandas type check matches numpy dtype names and pandas extension dtype class names.
# "float" admits integers too: a CSV of whole amounts parses as int64 and is still valid data.
# A tz-aware datetime column reports its scalar type as Timestamp; ingest stores times tz-aware
# (UTC), and a naive time is ambiguous, so only Timestamp passes. Category columns need no type
# check: their value-set check already rejects anything that is not one of the declared strings.
_TYPE_CHECKS: dict[Dtype, tuple[str, dict[str, Any]]] = {
    "int": ("expect_column_values_to_be_in_type_list", {"type_list": _INTS}),
    "float": ("expect_column_values_to_be_in_type_list",
              {"type_list": [*_INTS, "float32", "float64", "Float32Dtype", "Float64Dtype"]}),
    "string": ("expect_column_values_to_be_in_type_list", {"type_list": ["str", "StringDtype"]}),
    "datetime": ("expect_column_values_to_be_of_type", {"type_": "Timestamp"}),
}
_OBSERVED_MAX_CHARS = 200
# A unique column is judged on the distinct rows: an exact duplicate row is one finding (duplicate
# rows), an id shared by rows that differ another (reused id), never both for the same rows.
_UNIQUE = "expect_column_values_to_be_unique"
_NO_DUPLICATE_ROWS = "expect_compound_columns_to_be_unique"
_UNEXPECTED_ROWS = {_UNIQUE: "rows reuse an id of a different row", _NO_DUPLICATE_ROWS: "rows are exact duplicates"}


class ExpectationOutcome(BaseModel):
    model_config = ConfigDict(extra="forbid")

    expectation: str
    column: str | None
    success: bool
    observed: str

    @property
    def label(self) -> str:
        """How messages name it: ``expect_column_to_exist(column=amount)``."""
        return f"{self.expectation}(column={self.column})" if self.column else f"{self.expectation}()"


class ValidationReport(BaseModel):
    model_config = ConfigDict(extra="forbid")

    success: bool
    rows: int
    results: list[ExpectationOutcome]
    report_path: str

    @property
    def failed(self) -> list[str]:
        return [r.label for r in self.results if not r.success]


def suite_plan(contract: DataContract) -> list[tuple[str, dict[str, Any]]]:
    """The expectations (type, kwargs) the contract implies, in report order."""
    plan: list[tuple[str, dict[str, Any]]] = [
        # Per-value expectations pass vacuously on zero rows, so the row count is what catches that.
        ("expect_table_row_count_to_be_between", {"min_value": contract.min_rows}),
    ]
    for col in contract.columns:
        name = col.name
        plan.append(("expect_column_to_exist", {"column": name}))
        if not col.nullable:
            plan.append(("expect_column_values_to_not_be_null", {"column": name}))
        if col.dtype in _TYPE_CHECKS:
            kind, kwargs = _TYPE_CHECKS[col.dtype]
            plan.append((kind, {"column": name, **kwargs}))
        if col.min is not None or col.max is not None:
            plan.append(("expect_column_values_to_be_between",
                         {"column": name, "min_value": col.min, "max_value": col.max, "mostly": 1.0}))
        if col.categories is not None:
            plan.append(("expect_column_values_to_be_in_set",
                         {"column": name, "value_set": list(col.categories),
                          "mostly": 1.0 - contract.unknown_category_tolerance}))
        if col.unique:
            plan.append((_UNIQUE, {"column": name}))
    if not contract.allow_duplicate_rows:
        plan.append((_NO_DUPLICATE_ROWS, {"column_list": [c.name for c in contract.columns]}))
    plan.append(("expect_column_mean_to_be_between",
                 {"column": contract.label_column, "min_value": contract.label_rate.min,
                  "max_value": contract.label_rate.max}))
    return plan


def validate_snapshot(snapshot_path: Path, contract: DataContract, report_dir: Path) -> ValidationReport:
    """Run the contract's suite on a parquet snapshot; write the report; raise if anything failed."""
    report = check_snapshot(snapshot_path, contract, report_dir)
    raise_for_failures(report)
    return report


def check_snapshot(snapshot_path: Path, contract: DataContract, report_dir: Path) -> ValidationReport:
    """Run the contract's suite on a parquet snapshot and write the report; never raises on bad data."""
    try:
        frame = pd.read_parquet(snapshot_path)
    except FileNotFoundError as exc:
        raise InputError(f"snapshot not found: {snapshot_path}", field="snapshot_path") from exc
    plan = suite_plan(contract)
    outcomes = _run_suite(frame, plan)
    report_dir.mkdir(parents=True, exist_ok=True)
    report = ValidationReport(
        success=all(o.success for o in outcomes),
        rows=len(frame),
        results=outcomes,
        report_path=str(report_dir / JSON_NAME),
    )
    Path(report.report_path).write_text(report.model_dump_json(indent=2))
    (report_dir / HTML_NAME).write_text(_render_html(report, contract.name))
    return report


def raise_for_failures(report: ValidationReport) -> None:
    """DataValidationError naming every failed expectation, when any failed."""
    if not report.success:
        failed = report.failed
        raise DataValidationError(
            "data validation failed: " + "; ".join(failed), failed=failed, report_path=report.report_path
        )


def log_validation_to_mlflow(report: ValidationReport, run_id: str) -> None:
    """Attach both report files under ``validation/``, ``validation_success`` (1/0) and the count of expectations."""
    from mlflow.tracking import MlflowClient  # deferred: mlflow is slow to import

    client = MlflowClient()
    report_dir = Path(report.report_path).parent
    for name in (JSON_NAME, HTML_NAME):
        client.log_artifact(run_id, str(report_dir / name), artifact_path="validation")
    client.log_metric(run_id, "validation_success", 1.0 if report.success else 0.0)
    client.log_metric(run_id, "validation_expectations", float(len(report.results)))


def _run_suite(frame: pd.DataFrame, plan: list[tuple[str, dict[str, Any]]]) -> list[ExpectationOutcome]:
    # GX releases that ship usage analytics read this switch; a validation step never phones home.
    os.environ["GX_ANALYTICS_ENABLED"] = "False"
    import great_expectations as gx  # deferred: takes seconds to import
    from great_expectations.data_context.types.base import ProgressBarsConfig

    context = gx.get_context(mode="ephemeral")
    context.variables.progress_bars = ProgressBarsConfig(globally=False)  # no tqdm noise in logs
    source = context.data_sources.add_pandas("snapshot")
    on_distinct = [(kind, kwargs) for kind, kwargs in plan if kind == _UNIQUE]
    on_all = [(kind, kwargs) for kind, kwargs in plan if kind != _UNIQUE]
    results = _validate(source, "all_rows", frame, on_all)
    if on_distinct:
        results += _validate(source, "distinct_rows", frame.drop_duplicates(), on_distinct)
    order = {(kind, kwargs.get("column")): i for i, (kind, kwargs) in enumerate(plan)}
    outcomes = []
    for r in results:
        config = r.expectation_config
        assert config is not None  # GX attaches the configuration to every suite result
        outcomes.append(ExpectationOutcome(
            expectation=config.type,
            column=config.kwargs.get("column"),
            success=bool(r.success),
            observed=_observed(config.type, bool(r.success), r.result or {}, r.exception_info or {}),
        ))
    return sorted(outcomes, key=lambda o: order[(o.expectation, o.column)])


def _validate(source: Any, name: str, frame: pd.DataFrame, plan: list[tuple[str, dict[str, Any]]]) -> list[Any]:
    """Results of ``plan`` on ``frame`` as the data asset ``name`` of the pandas source."""
    import great_expectations as gx
    from great_expectations.expectations.expectation_configuration import ExpectationConfiguration

    batch_definition = source.add_dataframe_asset(name).add_batch_definition_whole_dataframe("whole")
    suite = gx.ExpectationSuite(name=f"data-contract-{name}")
    for kind, kwargs in plan:
        suite.add_expectation(ExpectationConfiguration(type=kind, kwargs=kwargs).to_domain_obj())
    # GX records an expectation on a missing column as a failed result carrying the exception, so
    # the run goes on and the missing column is reported next to expect_column_to_exist.
    result = batch_definition.get_batch(batch_parameters={"dataframe": frame}).validate(suite)
    return list(result.results)


def _observed(kind: str, success: bool, result: Mapping[str, Any], exception_info: Mapping[str, Any]) -> str:
    if kind == "expect_column_to_exist":  # GX reports nothing for it; say which way it went
        return "present" if success else "missing"
    if "observed_value" in result:
        text = _short(result["observed_value"])
    elif result.get("unexpected_count") is not None:
        text = f"{result['unexpected_count']} {_UNEXPECTED_ROWS.get(kind, 'unexpected')}"
        if result.get("unexpected_percent") is not None:
            text += f" ({result['unexpected_percent']:.3g}%)"
        sample = list(dict.fromkeys(map(_short, result.get("partial_unexpected_list") or [])))
        if sample:
            text += ", e.g. " + ", ".join(sample[:3])
    else:
        text = _exception_message(exception_info)
    return text[:_OBSERVED_MAX_CHARS]


def _exception_message(info: Mapping[str, Any]) -> str:
    # GX nests metric errors one level down, keyed by metric id; expectation errors sit at the top.
    for entry in (info, *(v for v in info.values() if isinstance(v, Mapping))):
        if entry.get("raised_exception"):
            return str(entry.get("exception_message"))
    return ""


def _short(value: Any) -> str:
    if isinstance(value, Mapping) and value:  # a whole row (duplicate rows): its first column names it
        key, first = next(iter(value.items()))
        return f"{key}={first}"
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _render_html(report: ValidationReport, contract_name: str) -> str:
    rows = "\n".join(
        f'<tr class="{"pass" if r.success else "fail"}"><td>{html.escape(r.expectation)}</td>'
        f"<td>{html.escape(r.column or '')}</td><td>{'pass' if r.success else 'FAIL'}</td>"
        f"<td>{html.escape(r.observed)}</td></tr>"
        for r in report.results
    )
    verdict = "passed" if report.success else f"FAILED ({len(report.failed)} expectations)"
    title = html.escape(f"Data validation: {contract_name}")
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>{title}</title>
<style>
body {{ font-family: sans-serif; margin: 2em; }}
table {{ border-collapse: collapse; }}
th, td {{ border: 1px solid #ccc; padding: 4px 8px; text-align: left; }}
tr.fail {{ background: #f8d7da; font-weight: bold; }}
</style></head><body>
<h1>{title}</h1>
<p>{report.rows} rows; {verdict}.</p>
<table><thead><tr><th>expectation</th><th>column</th><th>result</th><th>observed</th></tr></thead>
<tbody>
{rows}
</tbody></table>
</body></html>
"""
