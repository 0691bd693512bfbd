"""``mlops data ...`` and ``mlops features ...``: the raw data (generated or ingested as a snapshot) and the
feature state built from it (the online store, training/serving skew)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from mlops_cli.output import console, time_or_now
from mlops_cli.output import error_exit as _error_exit
from mlops_cli.output import load_settings as _settings

data_app = typer.Typer(help="Generate and ingest raw data.", no_args_is_help=True)
features_app = typer.Typer(help="Online feature state and training/serving skew.", no_args_is_help=True)


@data_app.command("generate")
def generate(
    out: Annotated[Path, typer.Option(help="Where to write the data (.parquet or .csv).")],
    rows: Annotated[int, typer.Option(min=100, help="Number of transactions.")] = 60_000,
    seed: Annotated[int, typer.Option(help="Random seed.")] = 42,
    scenario: Annotated[str, typer.Option(help="none, a drift (amount_inflation, ...), night_fraud.")] = "none",
    fraud_rate: Annotated[float, typer.Option(min=0.001, max=0.2, help="Share of fraud (card-transactions).")] = 0.015,
) -> None:
    """Write the seeded data of the bundled example whose contract is in use (MLOPS_CONTRACT_PATH)."""
    if out.suffix not in {".parquet", ".csv"}:
        _error_exit(f"--out must end in .parquet or .csv, got {out.name!r}", 2)
    from mlops.contract import load_contract
    from mlops.data.examples import example_generator
    from mlops.data.generator import SCENARIOS

    if scenario not in SCENARIOS:
        _error_exit(f"unknown scenario {scenario!r}; choose one of {', '.join(SCENARIOS)}", 2)
    contract = load_contract(_settings().contract_path)
    write = example_generator(contract)
    with console.status(f"generating {rows:,} rows of {contract.name}"):
        positive_share = write(out, rows, contract, seed=seed, scenario=scenario, fraud_rate=fraud_rate)
    console.print(f"wrote {rows:,} rows of {contract.name} ({positive_share:.2%} {contract.decisions.positive}) "
                  f"to {out}")


@data_app.command("ingest")
def ingest_command(source: Annotated[str, typer.Argument(help="CSV/Parquet path or URL.")]) -> None:
    """Snapshot a source into the immutable snapshot store and print its hash."""
    from mlops.contract import load_contract
    from mlops.data.source_columns import check_source_columns
    from mlops.preflight import check_source

    settings = _settings()
    contract = load_contract(settings.contract_path)
    check_source(source)
    check_source_columns(source, contract)  # a missing column is named before pandas is even imported
    from mlops.data.ingest import ingest

    snapshot = ingest(source, settings.snapshots_dir, contract)
    console.print(f"snapshot {snapshot.sha256} ({snapshot.rows:,} rows) at {snapshot.path}")


@features_app.command("materialize")
def materialize_command(
    end: Annotated[str | None, typer.Option(help="Load the entity histories as of this time (default: now).")] = None,
) -> None:
    """Merge the offline entity histories into the online store (incremental, never erases newer events)."""
    until = time_or_now(end, "--end")
    from feature_repo.store import materialize_online
    from mlops.contract import load_contract

    settings = _settings()
    with console.status("materializing the online store"):
        written = materialize_online(settings, load_contract(settings.contract_path), until)
    counts = ", ".join(f"{name} {count:,} entities" for name, count in written.items())
    console.print(f"online store as of {until.isoformat()}: {counts}")


@features_app.command("skew")
def skew_command(
    sample: Annotated[int, typer.Option(min=1, help="Logged predictions to compare.")] = 500,
    threshold: Annotated[float, typer.Option(min=0, max=1, help="Largest share of differing predictions.")] = 0.0,
    tolerance: Annotated[float, typer.Option(min=0, help="Largest absolute difference counted as equal.")] = 1e-9,
) -> None:
    """Served features vs offline point-in-time features; exits 1 when the differing share is above threshold."""
    from mlops.contract import load_contract
    from mlops.errors import FeatureSkewError
    from mlops.feature_skew import check_skew

    settings = _settings()
    report = check_skew(settings, load_contract(settings.contract_path), sample=sample, tolerance=tolerance)
    worst = f" ({report.worst_feature} of {report.worst_event})" if report.worst_feature else ""
    console.print(f"compared {report.compared:,} of {report.logged:,} logged predictions "
                  f"({report.beyond_offline:,} newer than the offline store, not compared): "
                  f"{report.share_differing:.2%} differ by more than {tolerance:g}; "
                  f"largest difference {report.max_abs_diff:.3g}{worst}", highlight=False)
    if report.label_features_differing:
        console.print(f"label features differ on {report.label_features_differing:,} of them: served, they count "
                      "only the labels delivered before the prediction (`mlops labels ingest`); not skew",
                      highlight=False)
    if report.flagged_inexact:
        console.print(f"{report.flagged_inexact:,} of them were answered flagged inexact (events older than their "
                      "histories reach back, see MLOPS_LATE_EVENT_ALLOWANCE_S): not compared", highlight=False)
    if report.share_differing > threshold:
        raise FeatureSkewError(f"feature skew {report.share_differing:.2%} is above the threshold {threshold:.2%}")
