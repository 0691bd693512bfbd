"""Platform settings: one pydantic-settings class, env prefix ``MLOPS_``, defaults = embedded mode.

All embedded state lives under ``home`` (default ``.mlops``), so a clean start is deleting one
folder. Derived locations are properties, not settings, so they always follow ``home`` unless
a production URI is set explicitly (``MLOPS_TRACKING_URI`` for an MLflow server, for example).
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

BUNDLED_CONTRACT = Path(__file__).parent / "contracts" / "fraud.yaml"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="MLOPS_", extra="forbid")

    home: Path = Field(default=Path(".mlops"), description="Root of all embedded state.")
    tracking_uri: str | None = Field(
        default=None, description="MLflow tracking URI; default is SQLite under home."
    )
    registry_uri: str | None = Field(default=None, description="MLflow registry URI; default = tracking.")
    contract_path: Path = Field(default=BUNDLED_CONTRACT, description="Data contract + feature spec.")
    experiment: str = "fraud-detection"
    model_name: str = "fraud-detector"
    serving_alias: str = "production"
    promotion_margin: float = Field(default=0.02, ge=0.0, le=1.0)
    seed: int = 42
    max_epochs: int = Field(default=30, ge=1)
    patience: int = Field(default=4, ge=1)
    batch_size: int = Field(default=512, ge=1)
    learning_rate: float = Field(default=2e-3, gt=0)
    parity_tolerance: float = Field(default=1e-5, gt=0)
    device: str = Field(default="auto", pattern="^(auto|cpu|cuda)$")
    demo_rows: int = Field(default=30_000, ge=1_000)
    max_clock_skew_s: float = Field(
        default=300.0, ge=0, description="How far in the future a request's event_timestamp may lie.")
    kfp_host: str | None = Field(default=None, description="Kubeflow Pipelines endpoint for submit/schedule.")
    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=1, le=65535)
    # Monitoring: drift levels, the cool-down between fallback switches, where its actions go.
    drift_psi_warning: float = Field(default=0.1, gt=0, description="PSI at which a feature's drift is WARNING.")
    drift_psi_critical: float = Field(default=0.2, gt=0, description="PSI at which a feature's drift is CRITICAL.")
    drift_min_rows: int = Field(default=30, ge=1, description="Fewest predictions a drift verdict needs.")
    drift_cooldown_s: float = Field(
        default=3600.0, ge=0, description="After a CRITICAL action, later CRITICAL verdicts act again only after this.")
    drift_retrain: bool = Field(default=True, description="Start a retraining run on a CRITICAL verdict.")
    service_url: str | None = Field(default=None, description="Prediction service for admin calls; default host:port.")
    admin_token: str | None = Field(default=None, description="Bearer token of the service's admin API.")
    pushgateway_url: str | None = Field(default=None, description="Prometheus Pushgateway for job metrics.")

    @property
    def resolved_home(self) -> Path:
        return self.home.expanduser().resolve()

    @property
    def resolved_tracking_uri(self) -> str:
        if self.tracking_uri:
            return self.tracking_uri
        return f"sqlite:///{self.resolved_home / 'mlflow.db'}"

    @property
    def artifact_root(self) -> Path:
        return self.resolved_home / "mlartifacts"

    @property
    def snapshots_dir(self) -> Path:
        return self.resolved_home / "snapshots"

    @property
    def feast_dir(self) -> Path:
        return self.resolved_home / "feast"

    @property
    def runs_dir(self) -> Path:
        """Per-run working files (validation reports, splits, exported models)."""
        return self.resolved_home / "runs"

    @property
    def kfp_root(self) -> Path:
        return self.resolved_home / "kfp"

    @property
    def monitoring_dir(self) -> Path:
        """Drift history, reports, ingested labels, cached reference profiles."""
        return self.resolved_home / "monitoring"

    @property
    def resolved_service_url(self) -> str:
        return (self.service_url or f"http://{self.host}:{self.port}").rstrip("/")
