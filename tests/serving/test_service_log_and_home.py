"""The service says in its log which model version it serves and where it came from; a copied home
(MLflow records absolute artifact paths) is refused in one line until `mlops init` points its store
at its own artifacts."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from served_platform import ServedPlatform
from service_process import free_port, start_service

from mlops import registry
from mlops.errors import ConfigError, NotFoundError
from mlops.settings import Settings

pytestmark = pytest.mark.integration


def _mlops(home: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mlops_cli", *args], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "MLOPS_HOME": str(home), **env}, check=False)


def test_the_service_logs_the_version_and_the_source_it_loaded(platform_home: ServedPlatform,
                                                                tmp_path: Path) -> None:
    settings = platform_home.settings
    service = start_service({"MLOPS_HOME": str(settings.resolved_home), "MLOPS_DEV_MODE": "true"},
                            tmp_path / "service.log")
    service.stop()
    name, version = settings.model_name, platform_home.version
    lines = [line for line in service.output().splitlines() if "serving.lifecycle" in line]
    assert len(lines) == 1, service.output()
    assert re.search(rf" INFO serving\.lifecycle: serving {re.escape(name)} version {version} \(alias production\) "
                     rf"from the registry \(models:/{re.escape(name)}/{version}, run {platform_home.run_id}\) "
                     r"on CPUExecutionProvider; was none$", lines[0]), lines[0]


def test_a_copied_home_is_refused_in_one_line_until_init_points_it_at_its_own_artifacts(
        platform_home: ServedPlatform, tmp_path: Path) -> None:
    original = platform_home.settings.resolved_home
    copy = tmp_path / "copied-home"
    shutil.copytree(original, copy, symlinks=True, ignore=shutil.ignore_patterns("*-shm"))
    settings = Settings(home=copy)
    with pytest.raises(ConfigError) as refused:
        registry.client(settings)
    assert refused.value.message == (
        f"{copy.resolve()} is a copy of {original}: its MLflow store keeps its artifacts in the original; "
        f"run `mlops init` here to point it at its own, or set MLOPS_HOME={original}")

    listed = _mlops(copy, "model", "list")
    served = _mlops(copy, "serve", MLOPS_PORT=str(free_port()))
    for result in (listed, served):
        assert result.returncode == 2, result.stdout + result.stderr
        assert result.stderr.strip().count("\n") == 0, result.stderr  # one line
        assert "is a copy of" in result.stderr
        assert "Traceback" not in result.stderr

    init = _mlops(copy, "init")
    assert init.returncode == 0, init.stderr
    assert f"its artifacts: {copy.resolve() / 'mlartifacts'}" in " ".join(init.stdout.split())
    client = registry.client(settings)
    own = (copy.resolve() / "mlartifacts").as_uri()
    assert client.get_run(platform_home.run_id).info.artifact_uri.startswith(own + "/")
    # The copy now reads its own artifacts: without them, its version cannot be downloaded.
    downloaded = registry.download_version(settings, platform_home.version, tmp_path / "dl")
    assert downloaded.onnx_path.read_bytes() == platform_home.onnx_path.read_bytes()
    shutil.rmtree(copy / "mlartifacts")
    with pytest.raises(NotFoundError, match=r"has no model\.onnx$"):
        registry.download_version(settings, platform_home.version, tmp_path / "dl-again")
