"""One exception hierarchy for the whole platform.

Every error a user can cause or meet derives from :class:`MLOpsError`. Each class carries the HTTP
status it maps to (used by the serving app's single exception handler) and the CLI exit code.
A message never carries a password: credentials in any URL it quotes are masked when it is made.
"""

from __future__ import annotations

import re

_URL_CREDENTIALS = re.compile(r"(?P<scheme>[a-z][a-z0-9+.-]*://)(?P<user>[^/\s:@]*):[^/\s@]*@", re.IGNORECASE)


def mask_credentials(text: str) -> str:
    """``text`` with the password of every ``scheme://user:password@host`` URL replaced by ``***``."""
    return _URL_CREDENTIALS.sub(r"\g<scheme>\g<user>:***@", text)


class MLOpsError(Exception):
    """Base of every platform error. ``http_status`` and ``exit_code`` say how it is reported.

    ``public``: what a server may tell an unauthenticated caller about a server-side failure
    (no paths, no SQL); without it, the caller is told only which part failed.
    """

    http_status: int = 500
    exit_code: int = 1

    def __init__(self, message: str, *, field: str | None = None, public: str | None = None) -> None:
        message = mask_credentials(message)
        super().__init__(message)
        self.message = message
        self.field = field
        self.public = public

    def to_dict(self) -> dict[str, str]:
        body = {"error": type(self).__name__, "detail": self.message}
        if self.field is not None:
            body["field"] = self.field
        return body


class ConfigError(MLOpsError):
    """Settings or a contract file are invalid."""

    exit_code = 2


class InputError(MLOpsError):
    """A caller passed something malformed (a bad path, a bad request field)."""

    http_status = 422
    exit_code = 2


class IngestError(InputError):
    """The raw source cannot be read or is not tabular data."""


class DataValidationError(MLOpsError):
    """The data broke its contract; ``failed`` names the failed expectations."""

    http_status = 422
    exit_code = 3

    def __init__(self, message: str, *, failed: list[str], report_path: str | None = None) -> None:
        super().__init__(message)
        self.failed = failed
        self.report_path = report_path


class TrainingError(MLOpsError):
    """Training could not produce a usable model."""


class ExportParityError(TrainingError):
    """The exported ONNX graph disagrees with the torch model beyond tolerance."""


class UnconvertibleModelError(ConfigError):
    """The chosen model has no ONNX converter: a setting to change (exit code 2), nothing is registered."""


class ManifestError(MLOpsError):
    """Kubernetes manifests in infra/ do not build, break a schema or a platform policy."""


class ClusterError(MLOpsError):
    """A cluster endpoint (Kubeflow Pipelines) refused a request or could not be reached."""


class NotFoundError(MLOpsError):
    """A model, version, alias or entity does not exist."""

    http_status = 404
    exit_code = 4


class RegistryError(MLOpsError):
    """The model registry failed or could not be reached; never read as "no model"."""

    http_status = 503


class PromotionConflictError(MLOpsError):
    """An alias moved since the caller read it (compare-and-set failed), or the move is not allowed."""

    http_status = 409


class AuthError(MLOpsError):
    """An admin call without the right bearer token."""

    http_status = 401


class ModelNotReadyError(MLOpsError):
    """No model holds the serving alias yet."""

    http_status = 503
    exit_code = 4


class PipelineError(MLOpsError):
    """A pipeline run failed; ``step`` names the step that stopped it.

    A run stopped at ingest or validate was given bad data, and a step that refused its input or its
    settings (``bad_input``: an error of exit code 2, such as a model no converter takes): that is bad
    input (exit code 2).
    """

    BAD_INPUT_STEPS = frozenset({"ingest", "validate"})

    def __init__(self, message: str, *, step: str | None = None, bad_input: bool = False) -> None:
        super().__init__(message)
        self.step = step
        self.exit_code = 2 if bad_input or step in self.BAD_INPUT_STEPS else 1


class RunLockedError(MLOpsError):
    """Another pipeline run on this host holds the run lock; exit code 75 (EX_TEMPFAIL: try later)."""

    exit_code = 75


class FeatureStoreError(MLOpsError):
    """The feature store failed or answered something inconsistent; never read as "no features"."""

    http_status = 503


class UnreadableLogError(MLOpsError):
    """A log file under the home (the failure log) cannot be read: a folder where a file belongs, no
    permission, bytes that are not UTF-8. Never read as "nothing logged" (an unread failure log would
    make a failing canary look healthy); exit code 2, as for any input the operator has to repair."""

    exit_code = 2


class FeatureSkewError(MLOpsError):
    """Served features differ from the offline point-in-time features beyond the threshold."""


class DriftWindowError(MLOpsError):
    """The prediction-log window cannot be judged for drift; the subclass says why (and the exit code)."""

    exit_code = 5


class EmptyWindowError(DriftWindowError):
    """No prediction was logged in the window."""

    exit_code = 5


class SmallWindowError(DriftWindowError):
    """The window has too few rows, or no column with values, for a drift verdict."""

    exit_code = 6


class AdminActionError(MLOpsError):
    """The prediction service refused or could not be reached for an admin action (fallback switch)."""


class StackError(MLOpsError):
    """A process of the native stack (`make stack`) could not start, become ready or stop."""
