"""The service stays small and safe: no training stack, no sibling packages, no pickle, no import effects."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from served_platform import ServedPlatform

SERVING = Path(__file__).resolve().parents[2] / "serving"
# Training/validation/monitoring stacks keep the image small; pickle-family loaders run code on load.
FORBIDDEN = frozenset({"torch", "great_expectations", "evidently", "pipelines", "monitoring",
                       "pickle", "cloudpickle", "dill", "joblib"})


def _imported_roots(path: Path) -> set[str]:
    roots: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            roots.add(node.module.split(".")[0])
    return roots


@pytest.mark.unit
def test_serving_sources_exist() -> None:
    assert {p.name for p in SERVING.glob("*.py")} >= {"app.py", "schemas.py", "main.py"}


@pytest.mark.unit
@pytest.mark.parametrize("path", sorted(SERVING.rglob("*.py")), ids=lambda p: p.name)
def test_no_forbidden_imports(path: Path) -> None:
    assert _imported_roots(path) & FORBIDDEN == set()


@pytest.mark.integration
def test_importing_the_service_has_no_side_effects(tmp_path: Path) -> None:
    """In a fresh interpreter: no heavy or sibling stack loaded, no state folder or file created."""
    home = tmp_path / "home"
    probe = (
        "import sys, serving.app, serving.main, serving.predictor, serving.schemas, serving.errors\n"
        "loaded = sorted(m for m in ('torch', 'feast', 'great_expectations', 'evidently', 'pipelines',"
        " 'monitoring') if m in sys.modules)\n"
        "assert not loaded, loaded\n"
    )
    env = {**os.environ, "MLOPS_HOME": str(home)}
    result = subprocess.run([sys.executable, "-c", probe], env=env, cwd=tmp_path, capture_output=True,
                            text=True, timeout=120, check=False)

    assert result.returncode == 0, result.stderr
    assert not home.exists()
    assert list(tmp_path.iterdir()) == []


@pytest.mark.integration
def test_the_running_service_needs_none_of_the_training_stack(tmp_path: Path) -> None:
    """Started with torch, great_expectations and evidently unimportable (as in the serving image),
    the service starts, opens its feature store, answers, and has loaded none of them; with the
    embedded SQLite online store it does not load feast either (seconds of start-up)."""
    probe = (
        "import sys\n"
        "for name in ('torch', 'great_expectations', 'evidently'):\n"
        "    sys.modules[name] = None  # importing it now raises ImportError\n"
        "from fastapi.testclient import TestClient\n"
        "from serving.main import service_app\n"
        "with TestClient(service_app()) as client:\n"
        "    assert client.get('/v2/health/live').status_code == 200\n"
        "    assert client.get('/v2/health/ready').status_code == 503\n"
        "    assert client.app.state.service.predictor.online.local, 'the feature store was not opened'\n"
        "loaded = sorted({m.split('.')[0] for m in sys.modules if sys.modules[m] is not None}\n"
        "                & {'torch', 'great_expectations', 'evidently', 'feast'})\n"
        "assert not loaded, loaded\n"
    )
    env = {**os.environ, "MLOPS_HOME": str(tmp_path / "home")}
    result = subprocess.run([sys.executable, "-W", "ignore", "-c", probe], env=env, cwd=tmp_path,
                            capture_output=True, text=True, timeout=180, check=False)

    assert result.returncode == 0, result.stderr[-3000:]


@pytest.mark.integration
def test_a_service_on_the_embedded_store_serves_its_model_without_mlflow(platform_home: ServedPlatform,
                                                                          body: dict[str, Any]) -> None:
    """The model is found and fetched with SQL on the SQLite store (mlops.served_registry): a started
    service answers from the registry's version with neither MLflow nor what it drags in (SQLAlchemy,
    alembic) loaded; they were half of a worker's memory and seconds of its start. Nor pandas, which
    pyarrow imported at the prediction log's first write only to probe for pandas objects; pandas
    itself still imports in that process, and pyarrow's to_pandas works."""
    probe = (
        "import json, sys\n"
        "from fastapi.testclient import TestClient\n"
        "from serving.main import service_app\n"
        "with TestClient(service_app()) as client:\n"
        "    health = client.get('/healthz').json()\n"
        "    answer = client.post('/predict', json=json.loads(sys.argv[1]))\n"
        "    assert answer.status_code == 200, answer.text\n"
        "loaded = sorted({m.split('.')[0] for m in sys.modules if sys.modules[m] is not None}\n"
        "                & {'mlflow', 'sqlalchemy', 'alembic', 'pandas'})\n"
        "import pyarrow\n"
        "frame = pyarrow.table({'x': [1.0, None]}).to_pandas()\n"
        "print(json.dumps({'health': health, 'loaded': loaded, 'nulls': int(frame['x'].isna().sum())}))\n"
    )
    env = {**os.environ, "MLOPS_HOME": str(platform_home.settings.resolved_home)}
    result = subprocess.run([sys.executable, "-W", "ignore", "-c", probe, json.dumps(body)], env=env,
                            capture_output=True, text=True, timeout=180, check=False)

    assert result.returncode == 0, result.stderr[-3000:]
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    assert (seen["health"]["model_version"], seen["health"]["source"]) == (platform_home.version, "registry")
    assert seen["loaded"] == []
    assert seen["nulls"] == 1
