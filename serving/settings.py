"""The prediction service's settings: the platform's base plus what only the service reads."""

from __future__ import annotations

from pydantic import Field

from mlops.settings import Settings


class ServingSettings(Settings):
    """The base settings and the service's own: request limits, polling, shadow scoring, gRPC."""

    max_clock_skew_s: float = Field(
        default=300.0, ge=0, description="How far in the future a request's event_timestamp may lie.")
    model_poll_interval_s: float = Field(
        default=30.0, gt=0, description="How often the service re-reads the alias it serves.")
    registry_startup_timeout_s: float = Field(
        default=3.0, gt=0, le=120, description="At start, how long the first load may wait for the registry "
        "before the cached model (serving/cache) is served; the load goes on and replaces it when it answers.")
    max_body_bytes: int = Field(default=1 << 20, ge=1024, description="Largest request body accepted (413).")
    shadow: bool = Field(default=False, description="Also score the `challenger` alias off the response path.")
    shadow_max_pending: int = Field(
        default=1000, ge=1, le=1_000_000, description="Most batches (one per request) waiting for the shadow thread "
        "(challenger shadow scores and champion-paired scores of canary rows); the excess is dropped and counted "
        "in mlops_shadow_dropped_rows_total{role}, so a slow shadow model never grows the service's memory.")
    prediction_log_fsync_interval_s: float = Field(
        default=1.0, ge=0.0, le=60.0, description="fsync the prediction log this often (0: before every answer); "
        "an answer waits only for the OS to hold the record, which survives SIGKILL but not power loss.")
    grpc_port: int = Field(default=0, ge=0, le=65535, description="Open Inference Protocol gRPC port (0: none).")
