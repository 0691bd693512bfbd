"""The Spark application ``spark-submit`` runs: the feature backfill, or batch scoring, over Parquet.

    spark-submit [--master URL ...] spark_job.py backfill SOURCE OUT [--contract FILE]
    spark-submit [--master URL ...] spark_job.py score FEATURES MODEL.onnx OUT [--contract FILE]

Paths are local paths or URIs Spark reads (s3a://, hdfs://); the model is read with fsspec. Bad
arguments or input are one line on stderr and exit code 2; ``python -m mlops.backfill.spark_job``
runs the same in a local Spark.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from mlops.errors import MLOpsError

_URI_MARK = "://"


def _location(text: str) -> Path | str:
    """A URI stays text (Path would fold its "//"); anything else is a local path."""
    return text if _URI_MARK in text else Path(text)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="spark_job.py", description="Feature backfill and batch scoring on Spark.")
    parser.add_argument("--contract", type=Path, default=None,
                        help="data contract (default: MLOPS_CONTRACT_PATH or the bundled one)")
    steps = parser.add_subparsers(dest="step", required=True)
    backfill = steps.add_parser("backfill", help="every transaction's window and time features")
    backfill.add_argument("source", help="Parquet file or folder of raw transactions")
    backfill.add_argument("out", help="Parquet folder to write: the rows plus one column per feature")
    score = steps.add_parser("score", help="the model's probability for every row of a backfill")
    score.add_argument("features", help="Parquet file or folder written by the backfill")
    score.add_argument("model", help="the exported ONNX graph (path or fsspec URL)")
    score.add_argument("out", help="Parquet folder to write: the rows plus `probability`")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)  # exits 2 with a usage line on bad arguments
    try:
        import fsspec

        from mlops.backfill.spark_engine import backfill_spark, score_spark
        from mlops.contract import load_contract
        from mlops.settings import Settings

        contract = load_contract(args.contract or Settings().contract_path)
        if args.step == "backfill":
            backfill_spark(_location(args.source), _location(args.out), contract)
        else:
            try:
                with fsspec.open(args.model, "rb") as handle:
                    model_onnx = handle.read()
            except OSError as exc:
                print(f"error: cannot read the model {args.model}: {exc}", file=sys.stderr)
                return 2
            score_spark(_location(args.features), model_onnx, _location(args.out), contract)
    except MLOpsError as exc:
        print(f"error: {exc.message}", file=sys.stderr)
        return exc.exit_code
    print(f"{args.step}: wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
