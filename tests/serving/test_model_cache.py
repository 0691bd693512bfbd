"""The serving cache (serving/model_cache.py) on real files: one registry's entry, checked on reading."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mlops.errors import ModelNotReadyError
from mlops.log_owner import registry_identity
from mlops.registry import ServedModel
from serving.model_cache import ModelCache

pytestmark = pytest.mark.unit

URI = "http://mlflow:s3cret@127.0.0.1:5000"


def _written(tmp_path: Path, uri: str = URI) -> ModelCache:
    graph = tmp_path / "model.onnx"
    graph.write_bytes(b"not really onnx, but bytes the cache must keep exactly")
    cache = ModelCache(tmp_path / "cache", uri, "card-transactions")
    cache.write("production", ServedModel("card-transactions", "7", "run-1", graph))
    return cache


def test_an_entry_reads_back_and_names_its_registry_without_credentials(tmp_path: Path) -> None:
    cache = _written(tmp_path)
    entry = cache.read("production")
    assert entry is not None
    assert (entry.name, entry.version, entry.run_id) == ("card-transactions", "7", "run-1")
    assert entry.onnx_path.read_bytes() == (tmp_path / "model.onnx").read_bytes()
    note = json.loads((cache.folder / "production.json").read_text())
    assert note["registry"] == "http://127.0.0.1:5000"
    assert "s3cret" not in (cache.folder / "production.json").read_text()
    assert cache.read("staging") is None


def test_the_same_registry_under_other_credentials_shares_the_entry_another_registry_does_not(
        tmp_path: Path) -> None:
    _written(tmp_path)
    same = ModelCache(tmp_path / "cache", "http://other:pw@127.0.0.1:5000", "card-transactions")
    assert same.read("production") is not None
    other = ModelCache(tmp_path / "cache", "http://127.0.0.1:5001", "card-transactions")
    assert other.read("production") is None
    assert registry_identity("sqlite:////tmp/x/mlflow.db") == "sqlite:////tmp/x/mlflow.db"


def test_a_changed_graph_or_a_note_of_another_registry_is_refused(tmp_path: Path) -> None:
    cache = _written(tmp_path)
    graph = cache.folder / "production.onnx"
    graph.write_bytes(graph.read_bytes() + b"!")
    with pytest.raises(ModelNotReadyError, match="sha256"):
        cache.read("production")

    cache = _written(tmp_path)
    note_path = cache.folder / "production.json"
    note_path.write_text(json.dumps({**json.loads(note_path.read_text()), "registry": "http://elsewhere:5000"}))
    with pytest.raises(ModelNotReadyError, match="elsewhere"):
        cache.read("production")
    note_path.write_text("{")
    with pytest.raises(ModelNotReadyError, match="unreadable"):
        cache.read("production")
