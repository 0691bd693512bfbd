"""``mlops predictions show``: what the service answered, read from the prediction log.

Each row is one answer: when it was logged, the transaction, the model version and its role
(champion, or a challenger's shadow score), the probability, the decision, the latency, and what
the model saw (the request's inputs and the computed features). ``table`` is for people, one line
per answer (what the model saw only with ``--features``); ``csv`` and ``json`` carry every column at
full precision, for other tools.
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Annotated, Any

import typer

from mlops_cli.output import console, err_console, error_exit, hint, load_settings, since_start

if TYPE_CHECKING:
    import pandas as pd

FORMATS = ("table", "csv", "json")
# The answer's own columns, first; everything after them is what the model saw.
_ANSWER_COLUMNS = ("logged_at", "event_id", "event_timestamp", "model_version", "role", "probability", "decision",
                   "latency_ms")
_LEFT_OUT = ("model_name", "request_id", "latency_s", "unknown_entities", "unknown_categories")

predictions_app = typer.Typer(help="What the service answered: the prediction log.", no_args_is_help=True)


@predictions_app.command("show")
def show_command(
    since: Annotated[str | None, typer.Option(help="Answers of the last 30m, 6h, 7d ... (default: all).")] = None,
    version: Annotated[str | None, typer.Option(help="Only answers of this model version.")] = None,
    output: Annotated[str, typer.Option("--format", metavar="[table|csv|json]",
                                        help="table (for people), csv or json (every column).")] = "table",
    last: Annotated[int, typer.Option(min=0, help="Only the newest N answers (0: all).")] = 50,
    features: Annotated[bool, typer.Option("--features", help="The table also shows what the model saw "
                                           "(inputs and features; csv and json always carry them).")] = False,
) -> None:
    """The logged answers, oldest first, one line each: times, probability, decision, role and latency."""
    if output not in FORMATS:
        error_exit(f"--format must be one of {', '.join(FORMATS)}, got {output!r}", 2)
    if version is not None and not version.isdigit():
        error_exit(f"--version must be a version number, got {version!r}", 2)
    start = since_start(since)
    settings = load_settings()
    from mlops.prediction_frame import read_prediction_frame
    from mlops.prediction_log import log_dir

    frame = served_answers(read_prediction_frame(log_dir(settings), start=start), version, last)
    if frame.empty:
        window = f" in the last {since}" if since else ""
        of_version = f" by version {version}" if version else ""
        # csv and json stay parseable (a header, an empty list); the note goes to stderr then.
        say = console if output == "table" else err_console
        say.print(f"no predictions logged{window}{of_version} under {log_dir(settings)}", highlight=False)
        hint("send some: `make demo` replays the test split through the service, or `make serve` and POST "
             "transactions to /predict", to=say)
        if output == "table":
            return
    if output == "csv":
        frame.to_csv(sys.stdout, index=False)
    elif output == "json":
        sys.stdout.write(json.dumps(frame.to_dict(orient="records"), default=_json_value, indent=1) + "\n")
    else:
        from mlops.log_owner import describe_store, log_owner

        owner = log_owner(log_dir(settings))
        _print_table(frame, with_features=features, store=describe_store(owner) if owner else "no store yet")


def served_answers(frame: pd.DataFrame, version: str | None, last: int) -> pd.DataFrame:
    """The log's frame as answers: version filter, the newest ``last`` (0: all), answer columns first."""
    if version is not None:
        frame = frame[frame["model_version"] == version]
    if last:
        frame = frame.tail(last)
    frame = frame.assign(latency_ms=frame["latency_s"] * 1000)
    seen = [c for c in frame.columns if c not in _ANSWER_COLUMNS and c not in _LEFT_OUT]
    return frame[[*_ANSWER_COLUMNS, *seen]].reset_index(drop=True)


def _json_value(value: Any) -> Any:
    """Times as ISO 8601; NumPy scalars as plain numbers (floats at full precision)."""
    if hasattr(value, "isoformat"):
        return value.isoformat()
    if hasattr(value, "item"):
        return value.item()
    raise TypeError(f"cannot write {type(value).__name__} as JSON")


def _print_table(frame: pd.DataFrame, *, with_features: bool, store: str) -> None:
    """One line per answer (cells are cut with an ellipsis rather than wrapped), under one header line;
    the count and the tracking store the versions belong to go to stderr. What the model saw, a long
    cell, only when asked for."""
    from rich.table import Table

    table = Table(box=None, pad_edge=False, header_style="bold")
    for name in ("logged at (UTC)", "event time (UTC)", "transaction", "version", "role", "probability",
                 "decision", "latency ms"):
        table.add_column(name, no_wrap=True, overflow="ellipsis")
    if with_features:
        table.add_column("inputs and features", overflow="fold")
    seen = [c for c in frame.columns if c not in _ANSWER_COLUMNS]
    for values in frame.to_dict(orient="records"):
        latency = values["latency_ms"]
        row = [_time(values["logged_at"]), _time(values["event_timestamp"]), str(values["event_id"]),
               str(values["model_version"]), str(values["role"]), f"{values['probability']:.4f}",
               str(values["decision"]), "" if latency != latency else f"{latency:.1f}"]  # NaN: a shadow score
        if with_features:
            row.append(", ".join(f"{name}={_short(values[name])}" for name in seen))
        table.add_row(*row)
    err_console.print(f"{len(frame):,} answers, oldest first; versions of {store}"
                      + ("" if with_features else " (--features: what the model saw)"), highlight=False)
    console.print(table, soft_wrap=False)


def _time(value: Any) -> str:
    return "" if value is None or value != value else f"{value:%Y-%m-%d %H:%M:%S}"


def _short(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)
