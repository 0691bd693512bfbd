"""Validate a snapshot against its data contract with a Great Expectations suite; fail closed.

The suite is derived from the contract alone (see :func:`suite_plan`), so another dataset is only
another contract file. It runs batch by batch over the snapshot, memory bounded by a batch and
uniqueness exact over the whole file (see :mod:`pipelines.steps.validate_batches`). Every run
writes ``validation.json`` and ``validation.html`` to the report directory, pass or fail, with
what the contract expects and what the data showed for every expectation, in the contract's
words (see :mod:`pipelines.steps.validate_phrasing`); a failure then raises
:class:`DataValidationError` naming each failed expectation.
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from mlops.contract import DataContract, Dtype
from mlops.errors import DataValidationError, InputError
from pipelines.steps.validate_batches import COLUMN_EXISTS, NO_DUPLICATE_ROWS, UNIQUE, run_suite
from pipelines.steps.validate_phrasing import NOT_CHECKED_MISSING, expected, observed

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


class ExpectationOutcome(BaseModel):
    model_config = ConfigDict(extra="forbid")

    expectation: str
    column: str | None
    success: bool
    expected: str
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
            plan.append((UNIQUE, {"column": name}))
    if not contract.allow_duplicate_rows:
        plan.append((NO_DUPLICATE_ROWS, {"column_list": [c.name for c in contract.columns]}))
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
    if not snapshot_path.is_file():
        raise InputError(f"snapshot not found: {snapshot_path}", field="snapshot_path")
    rows, columns, tallies = run_suite(snapshot_path, suite_plan(contract))
    outcomes = [ExpectationOutcome(expectation=t.kind, column=t.column, success=t.success,
                                   expected=expected(t, contract), observed=observed(t, columns, contract))
                for t in tallies]
    report_dir.mkdir(parents=True, exist_ok=True)
    report = ValidationReport(
        success=all(o.success for o in outcomes),
        rows=rows,
        results=outcomes,
        report_path=str(report_dir / JSON_NAME),
    )
    Path(report.report_path).write_text(report.model_dump_json(indent=2))
    (report_dir / HTML_NAME).write_text(_render_html(report, contract.name))
    return report


def raise_for_failures(report: ValidationReport) -> None:
    """DataValidationError listing every failed expectation (``failed``) and, in its message, what was
    expected and observed, in the contract's words; a missing column is named once, not per expectation."""
    if not report.success:
        raise DataValidationError("data validation failed: " + failure_summary(report), failed=report.failed,
                                  report_path=report.report_path)


def failure_summary(report: ValidationReport) -> str:
    """The failed expectations as one line: ``column amount: expected ..., observed ...; ...``."""
    parts = []
    for r in report.results:
        if r.success or r.observed.startswith(NOT_CHECKED_MISSING):  # the missing column is named by its own check
            continue
        if r.expectation == COLUMN_EXISTS:
            parts.append(f"column {r.column} is missing")
        else:
            subject = f"column {r.column}" if r.column else "rows"
            parts.append(f"{subject}: expected {r.expected}, observed {r.observed}")
    return "; ".join(parts)


def log_validation_to_mlflow(report: ValidationReport, run_id: str) -> None:
    """Attach both report files under ``validation/``, ``validation_success`` (1/0) and the count of expectations."""
    from mlflow.tracking import MlflowClient  # deferred: mlflow is slow to import

    client = MlflowClient()
    report_dir = Path(report.report_path).parent
    for name in (JSON_NAME, HTML_NAME):
        client.log_artifact(run_id, str(report_dir / name), artifact_path="validation")
    client.log_metric(run_id, "validation_success", 1.0 if report.success else 0.0)
    client.log_metric(run_id, "validation_expectations", float(len(report.results)))


def _render_html(report: ValidationReport, contract_name: str) -> str:
    rows = "\n".join(
        f'<tr class="{"pass" if r.success else "fail"}"><td>{html.escape(r.expectation)}</td>'
        f"<td>{html.escape(r.column or '')}</td><td>{'pass' if r.success else 'FAIL'}</td>"
        f"<td>{html.escape(r.expected)}</td><td>{html.escape(r.observed)}</td></tr>"
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
<table><thead><tr><th>expectation</th><th>column</th><th>result</th><th>expected</th><th>observed</th></tr></thead>
<tbody>
{rows}
</tbody></table>
</body></html>
"""
