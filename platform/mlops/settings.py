"""Platform settings: the base every deployable's settings class extends, env prefix ``MLOPS_``,
defaults = embedded mode.

This base holds what the core and more than one deployable read (where state lives, the stores,
the model and its alias, where the service listens). Each deployable adds its own on top and
constructs its own class: ``pipelines.settings.PipelineSettings`` (training, evaluation, the demo),
``serving.settings.ServingSettings``, ``monitoring.settings.MonitoringSettings``,
``native_stack.settings.StackSettings``, ``ci_gates.settings.GateSettings``. Core functions take this base.

All embedded state lives under ``home`` (default ``.mlops``), so a clean start is deleting one
folder. Derived locations are properties, not settings, so they always follow ``home`` unless
a production URI is set explicitly (``MLOPS_TRACKING_URI`` for an MLflow server, for example).

A YAML file of settings (``params.yaml``, which dvc.yaml's stages read) is a source only when
``MLOPS_PARAMS_FILE`` names it, so no file in the working directory changes settings unasked.
``MLOPS_PROFILE=NAME`` adds the values of ``profiles/NAME.env`` (``MLOPS_*`` lines).
Precedence: environment, then the params file, then the profile, then the defaults.

A profile or params file is shared by every deployable, so a key that names another deployable's
setting (``DEPLOYABLE_FIELDS``) is left to it; a key no deployable knows fails validation
(``extra="forbid"``). An ``MLOPS_*`` environment variable that names no setting is ignored.
"""

from __future__ import annotations

import json
import os
from datetime import timedelta
from pathlib import Path
from typing import Any, Literal, Self
from urllib.parse import quote, unquote, urlsplit, urlunsplit

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    DotEnvSettingsSource,
    InitSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from mlops.contracts import BUNDLED_CONTRACT
from mlops.errors import ConfigError
from mlops.yaml_text import YAMLError, parse_yaml

ENV_PREFIX = "MLOPS_"
PARAMS_FILE_VARIABLE = "MLOPS_PARAMS_FILE"
# The whole settings of a parent process as one JSON record (settings_record): a kfp.local step or a
# torchrun rank takes its settings from it, ahead of any MLOPS_* variable it inherits.
SETTINGS_RECORD_VARIABLE = "MLOPS_SETTINGS_JSON"
PROFILES_DIR = Path(__file__).parent / "profiles"


# The settings the deployables add to the base; tests/platform/test_settings_per_deployable.py holds
# this list to their classes.
DEPLOYABLE_FIELDS = frozenset({
    "promotion_margin", "promotion_min_pr_auc_lift", "rollout", "canary_percent", "model_family", "model_params",
    "calibration",
    "seed", "max_epochs", "patience",
    "batch_size", "learning_rate",
    "parity_tolerance", "device", "hidden_sizes", "dropout", "weight_decay", "precision", "compile_model",
    "negative_sample_rate", "max_train_seconds", "max_epoch_rows", "checkpoint_dir", "checkpoint_interval_s",
    "slice_f1_tolerance", "slice_min_positives", "slice_min_rows", "demo_rows",  # pipelines
    "max_clock_skew_s", "model_poll_interval_s", "max_body_bytes", "shadow", "shadow_max_pending",
    "prediction_log_fsync_interval_s", "grpc_port", "registry_startup_timeout_s",  # serving
    "drift_psi_warning", "drift_psi_critical", "drift_min_rows", "drift_cooldown_s", "drift_retrain",  # monitoring
    "retrain_runner",
    "estimate_drop_warning", "estimate_drop_critical", "calibration_ece_limit", "calibration_min_labelled",
    "canary_min_rows", "canary_min_latency_rows", "canary_min_labelled", "canary_min_positives",
    "canary_error_rate_margin", "canary_latency_ratio", "canary_latency_floor_ms",
    "canary_score_psi", "canary_decision_rate_ratio",
    "canary_pr_auc_margin", "canary_significance",
    "stack_postgres_port", "stack_prometheus_port", "stack_scrape_interval_s",  # native_stack
    "gate_min_f1", "gate_max_p99_ratio",  # ci_gates
})


def contract_name(path: Path) -> str:
    """The ``name`` a contract file gives its data set, or the file's stem when it cannot be read."""
    try:
        raw = parse_yaml(Path(path).read_text())
    except (OSError, YAMLError):
        return Path(path).stem
    name = raw.get("name") if isinstance(raw, dict) else None
    return name if isinstance(name, str) and name else Path(path).stem


def profile_path(name: str) -> Path:
    return PROFILES_DIR / f"{name}.env"


class Settings(BaseSettings):
    """What the core and several deployables share; a deployable's class adds its own settings."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="forbid")

    profile: str | None = Field(default=None, description="Settings profile: profiles/<name>.env under the env.")
    home: Path = Field(default=Path(".mlops"), description="Root of all embedded state.")
    tracking_uri: str | None = Field(
        default=None, description="MLflow tracking URI; default is SQLite under home."
    )
    registry_uri: str | None = Field(default=None, description="MLflow registry URI; default = tracking.")
    contract_path: Path = Field(default=BUNDLED_CONTRACT, description="Data contract + feature spec.")
    experiment: str = Field(default="", description="MLflow experiment; default: the contract's name.")
    model_name: str = Field(default="", description="Registered model; default: the contract's name.")
    serving_alias: str = "production"
    kfp_host: str | None = Field(default=None, description="Kubeflow Pipelines endpoint for submit/schedule.")
    admin_token: SecretStr | None = Field(default=None, description="Bearer token of the service's admin API.")
    dev_mode: bool = Field(
        default=True, description="Embedded mode: the admin API is open when no token is set. Set false "
        "in production, where the service then refuses to start without MLOPS_ADMIN_TOKEN.")
    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=1, le=65535)
    service_url: str | None = Field(default=None, description="Prediction service for admin calls; default host:port.")
    pushgateway_url: str | None = Field(default=None, description="Prometheus Pushgateway for job metrics.")
    # Production-shaped stores (the `stack` profile, docker-compose, Kubernetes).
    online_store: Literal["sqlite", "redis"] = Field(
        default="sqlite", description="Feast's online store: embedded SQLite under home, or Redis at redis_url.")
    redis_url: SecretStr | None = Field(default=None, description="redis://[:password@]host:port/db")
    late_event_allowance_s: float = Field(
        default=86_400.0, ge=0, description="How much older than an entity's newest event an event may be and "
        "still get exact features: the online histories keep this much beyond the longest window.")
    redis_password_file: Path | None = Field(
        default=None, description="File holding Redis' password when redis_url carries none (relative: under home).")
    # An MLflow server with authentication (MLflow's basic-auth app): what the platform's clients send.
    tracking_username: str | None = Field(default=None, description="User of an MLflow server that needs one.")
    tracking_password: SecretStr | None = Field(default=None, description="That user's password.")
    tracking_password_file: Path | None = Field(
        default=None, description="File holding that password instead (relative: under home).")
    feature_engine: str = Field(
        default="duckdb", description="The feature engine (backfill, latest state, batch scoring) by its registered "
        "name: duckdb (embedded) or spark (Apache Spark); see mlops.backfill.interface.")
    duckdb_memory_limit: str = Field(
        default="2GB", description="DuckDB's memory bound in every "
        "columnar job (backfill, split, latest state, offline queries); sorts and windows spill beyond it.")
    tracking_http_retries: int = Field(
        default=2, ge=0, le=10, description="Retries of each MLflow HTTP call, 1 s then 2 s apart (MLflow's "
        "default, 7 with backoff, takes about 4 minutes to report a dead tracking server).")
    tracking_http_timeout_s: float = Field(
        default=5.0, gt=0, le=600, description="Connect/read timeout of each MLflow HTTP call (MLflow's: 120 s).")
    @field_validator("profile")
    @classmethod
    def _known_profile(cls, name: str | None) -> str | None:
        if name is not None and not profile_path(name).is_file():
            known = ", ".join(sorted(p.stem for p in PROFILES_DIR.glob("*.env")))
            raise ValueError(f"unknown profile {name!r}; known: {known}")
        return name

    @field_validator("redis_url")
    @classmethod
    def _redis_url(cls, url: SecretStr | None) -> SecretStr | None:
        if url is not None:
            parts = urlsplit(url.get_secret_value())
            if parts.scheme not in ("redis", "rediss") or not parts.hostname:
                raise ValueError("must look like redis://[:password@]host:port/db")
            if "," in (parts.password or ""):
                raise ValueError("a password with a comma cannot reach Feast's connection string")
        return url

    @model_validator(mode="after")
    def _names_from_contract(self) -> Self:
        # The experiment and the registered model are named after the data set unless set. Only the
        # contract's name is read here; a broken contract is reported by whoever loads it.
        if not (self.experiment and self.model_name):
            name = contract_name(self.contract_path)
            self.experiment = self.experiment or name
            self.model_name = self.model_name or name
        return self

    @property
    def pipeline_name(self) -> str:
        """The training pipeline's name (KFP pipeline, run names): the registered model's, then -training."""
        return f"{self.model_name}-training"

    @model_validator(mode="after")
    def _redis_needs_url(self) -> Self:
        if self.online_store == "redis" and self.redis_url is None:
            raise ValueError("MLOPS_ONLINE_STORE=redis needs MLOPS_REDIS_URL")
        return self

    @classmethod
    def settings_customise_sources(
        cls, settings_cls: type[BaseSettings], init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource, dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        params = params_file_source(settings_cls)
        name = os.environ.get("MLOPS_PROFILE")
        # An unknown profile name is reported by the field validator.
        profile: tuple[PydanticBaseSettingsSource, ...] = ()
        if name and profile_path(name).is_file():
            profile = (DotEnvSettingsSource(settings_cls, env_file=profile_path(name), env_prefix=ENV_PREFIX),)
        shared = tuple(OwnSettingsOnly(settings_cls, source) for source in (*params, *profile))
        return (init_settings, *settings_record_source(settings_cls), env_settings, *shared, dotenv_settings,
                file_secret_settings)

    @property
    def resolved_home(self) -> Path:
        return self.home.expanduser().resolve()

    @property
    def late_event_allowance(self) -> timedelta:
        return timedelta(seconds=self.late_event_allowance_s)

    @property
    def resolved_tracking_uri(self) -> str:
        if self.tracking_uri:
            return self.tracking_uri
        return f"sqlite:///{self.resolved_home / 'mlflow.db'}"

    @property
    def tracking_credentials(self) -> tuple[str, str] | None:
        """(user, password) for the MLflow server; None without a user; ConfigError without a password."""
        if not self.tracking_username:
            return None
        if self.tracking_password is not None:
            return self.tracking_username, self.tracking_password.get_secret_value()
        if self.tracking_password_file is None:
            raise ConfigError("MLOPS_TRACKING_USERNAME is set without MLOPS_TRACKING_PASSWORD or "
                              "MLOPS_TRACKING_PASSWORD_FILE", field="tracking_password")
        return self.tracking_username, self._secret_file(self.tracking_password_file, "tracking_password_file")

    @property
    def resolved_redis_url(self) -> str | None:
        """redis_url, with the password of redis_password_file put in when the URL carries none."""
        if self.redis_url is None:
            return None
        url = self.redis_url.get_secret_value()
        parts = urlsplit(url)
        if parts.password or self.redis_password_file is None:
            return url
        password = self._secret_file(self.redis_password_file, "redis_password_file")
        if "," in password:
            raise ConfigError("a Redis password with a comma cannot reach Feast's connection string",
                              field="redis_password_file")
        user = quote(unquote(parts.username or ""), safe="")
        return urlunsplit(parts._replace(netloc=f"{user}:{quote(password, safe='')}@{parts.netloc}"))

    def _secret_file(self, path: Path, field: str) -> str:
        """The secret kept in ``path`` (relative: under home); ConfigError naming the setting when it is not there."""
        resolved = path if path.is_absolute() else self.resolved_home / path
        try:
            secret = resolved.read_text().strip()
        except OSError as exc:
            raise ConfigError(f"MLOPS_{field.upper()}: cannot read {resolved} ({exc.strerror}); the native stack "
                              "writes it when it starts (make stack)", field=field) from exc
        if not secret:
            raise ConfigError(f"MLOPS_{field.upper()}: {resolved} is empty", field=field)
        return secret

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
    def logs_dir(self) -> Path:
        """One log file per local pipeline run: every step's streamed output and the libraries' logs."""
        return self.resolved_home / "logs"

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


class OwnSettingsOnly(PydanticBaseSettingsSource):
    """A shared file's values without those another deployable's class declares."""

    def __init__(self, settings_cls: type[BaseSettings], source: PydanticBaseSettingsSource) -> None:
        super().__init__(settings_cls)
        self.source = source

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return self.source.get_field_value(field, field_name)

    def __call__(self) -> dict[str, Any]:
        own = self.settings_cls.model_fields
        # A profile's unknown lines keep their variable's name (mlops_...), a params file's keys are names.
        return {key: value for key, value in self.source().items()
                if key in own or key.removeprefix(ENV_PREFIX.lower()) not in DEPLOYABLE_FIELDS}


def params_file_source(settings_cls: type[BaseSettings]) -> tuple[PydanticBaseSettingsSource, ...]:
    """The YAML file ``MLOPS_PARAMS_FILE`` names (keys are setting names), or nothing when it is unset."""
    name = os.environ.get(PARAMS_FILE_VARIABLE)
    if not name:
        return ()
    path = Path(name)
    if not path.is_file():
        raise ConfigError(f"{PARAMS_FILE_VARIABLE}={name}: no such file", field=PARAMS_FILE_VARIABLE)
    try:
        values = parse_yaml(path.read_text(encoding="utf-8"))
    except YAMLError as exc:
        raise ConfigError(f"{PARAMS_FILE_VARIABLE}={name} is not valid YAML: {exc}".replace("\n", " "),
                          field=PARAMS_FILE_VARIABLE) from exc
    if values is not None and not isinstance(values, dict):
        raise ConfigError(f"{PARAMS_FILE_VARIABLE}={name} must map setting names to values, "
                          f"not hold a {type(values).__name__}", field=PARAMS_FILE_VARIABLE)
    # Read like keyword arguments, so a key that names no setting fails validation (extra="forbid").
    return (InitSettingsSource(settings_cls, init_kwargs=values or {}),)


def settings_record(settings: Settings) -> str:
    """``settings`` as the one JSON record a child process is handed in SETTINGS_RECORD_VARIABLE:
    secrets as themselves (not masked), home and contract as absolute paths (the child may start elsewhere)."""
    values = settings.model_dump(mode="json")
    for name in values:
        value = getattr(settings, name)
        if isinstance(value, SecretStr):
            values[name] = value.get_secret_value()
    values["home"] = str(settings.resolved_home)
    values["contract_path"] = str(settings.contract_path.expanduser().resolve())
    return json.dumps(values)


def settings_record_source(settings_cls: type[BaseSettings]) -> tuple[PydanticBaseSettingsSource, ...]:
    """The record SETTINGS_RECORD_VARIABLE holds (its fields this class has), or nothing when it is unset."""
    text = os.environ.get(SETTINGS_RECORD_VARIABLE)
    if not text:
        return ()
    try:
        values = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{SETTINGS_RECORD_VARIABLE} is not a JSON settings record: {exc}",
                          field=SETTINGS_RECORD_VARIABLE) from exc
    # A parent's class may have settings this one lacks (a pipeline's record read by the base class).
    own = {key: value for key, value in values.items() if key in settings_cls.model_fields}
    return (InitSettingsSource(settings_cls, init_kwargs=own),)
