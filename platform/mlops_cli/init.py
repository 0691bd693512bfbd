"""`mlops init`: create the tracking store on purpose.

The pipeline and the service refuse a local tracking store that does not exist (MLflow would
silently start an empty registry there); this is the command that makes one.
"""

from __future__ import annotations

import typer

from mlops.errors import MLOpsError, mask_credentials
from mlops_cli.output import console
from mlops_cli.output import load_settings as _settings


def init_command() -> None:
    """Create the tracking store MLOPS_TRACKING_URI names (default: SQLite under MLOPS_HOME), and its folder;
    in a copied home, point its store at the copy's own artifacts."""
    settings = _settings()
    from mlops import registry
    from mlops.store_location import recorded_artifact_root

    try:
        copied_from = recorded_artifact_root(settings)
        path = registry.create_store(settings)
    except MLOpsError:
        raise  # already one line (the root command prints it); the next handler is for MLflow's own
    except Exception as exc:  # MLflow's own errors (a read-only folder): one line, not a traceback
        raise MLOpsError(f"cannot create the tracking store at {settings.resolved_tracking_uri}: "
                         f"{type(exc).__name__}: {exc}") from exc
    if path is None:
        console.print(f"tracking server {mask_credentials(settings.resolved_tracking_uri)} keeps its own store; "
                      "nothing to create", highlight=False, soft_wrap=True)
    else:
        console.print(f"tracking store ready at {path}", highlight=False, soft_wrap=True)
        if copied_from is not None:
            console.print(f"its artifacts: {settings.artifact_root} (this home's own; the store named {copied_from})",
                          highlight=False, soft_wrap=True)


def register(app: typer.Typer) -> None:
    app.command("init")(init_command)
