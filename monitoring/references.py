"""The reference profile of a registered model version, read from its training run's artifacts
(``reference/profile.json``) and cached under ``<home>/monitoring/references/``."""

from __future__ import annotations

from pathlib import Path
from tempfile import TemporaryDirectory

from mlops.errors import NotFoundError
from mlops.reference_profile import PROFILE_ARTIFACT, ReferenceProfile, load_profile, save_profile
from mlops.registry_client import connect
from mlops.settings import Settings


def cached_profile_path(settings: Settings, model_name: str, version: str) -> Path:
    return settings.monitoring_dir / "references" / f"{model_name}-v{version}.json"


def fetch_profile(settings: Settings, model_name: str, version: str) -> ReferenceProfile:
    """The profile stored with ``model_name`` ``version``; NotFoundError naming what is missing."""
    from mlflow.exceptions import MlflowException

    cached = cached_profile_path(settings, model_name, version)
    if cached.exists():
        return load_profile(cached)
    stores = connect(settings)
    try:
        run_id = stores.client.get_model_version(model_name, version).run_id
    except MlflowException as exc:
        raise NotFoundError(f"model {model_name} version {version} is not registered: {exc.message}") from exc
    with TemporaryDirectory() as tmp:
        try:
            local = stores.download(Path(tmp), run_id=run_id, artifact_path=PROFILE_ARTIFACT)
        except (MlflowException, OSError) as exc:
            raise NotFoundError(f"model {model_name} version {version} has no reference profile ({PROFILE_ARTIFACT} "
                                f"in run {run_id}); it predates profiles: retrain it") from exc
        return load_profile(save_profile(load_profile(local), cached))
