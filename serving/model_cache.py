"""The last model a service served, kept on disk so a replica started during a registry outage serves it.

One folder per registry (a hash of the tracking URI without its credentials) and model name, one
entry per alias: ``<alias>.onnx`` and ``<alias>.json``, the note naming the registry, the version,
its run and the graph's sha256. Both are written beside and renamed, the graph first, so a reader
sees the old entry or the new one, whole. A graph whose sha256 differs from its note, or a note of
another registry, is refused: the cache never serves what it did not write, and never a model of
another tracking store under the same version number. Only ONNX bytes and JSON: nothing is unpickled.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from mlops.errors import ModelNotReadyError
from mlops.log_owner import registry_identity
from mlops.registry import ServedModel

_CHUNK = 1 << 20


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        while chunk := stream.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


@dataclass(frozen=True)
class ModelCache:
    """The cache of one registry's model under ``root`` (``<home>/serving/cache``)."""

    root: Path
    tracking_uri: str
    model_name: str

    @property
    def registry(self) -> str:
        return registry_identity(self.tracking_uri)

    @property
    def folder(self) -> Path:
        key = hashlib.sha256(self.registry.encode()).hexdigest()[:16]
        return self.root / key / self.model_name

    def write(self, alias: str, served: ServedModel) -> None:
        """Keep ``served`` as the alias' entry (graph first, then the note that vouches for it)."""
        self.folder.mkdir(parents=True, exist_ok=True)
        partial = self.folder / f".{alias}.{os.getpid()}.onnx"
        shutil.copyfile(served.onnx_path, partial)
        note = {"registry": self.registry, "name": served.name, "version": served.version,
                "run_id": served.run_id, "sha256": _sha256(partial)}
        partial.replace(self.folder / f"{alias}.onnx")
        partial_note = self.folder / f".{alias}.{os.getpid()}.json"
        partial_note.write_text(json.dumps(note))
        partial_note.replace(self.folder / f"{alias}.json")

    def holds(self, alias: str) -> bool:
        """Whether the alias has an entry (not yet checked: :meth:`read` checks it)."""
        return (self.folder / f"{alias}.onnx").is_file() and (self.folder / f"{alias}.json").is_file()

    def read(self, alias: str) -> ServedModel | None:
        """The alias' entry; None when there is none; ModelNotReadyError when it fails its checks."""
        graph, note_path = self.folder / f"{alias}.onnx", self.folder / f"{alias}.json"
        if not (graph.is_file() and note_path.is_file()):
            return None
        try:
            note = json.loads(note_path.read_text())
            registry_name, name, version, sha = note["registry"], note["name"], note["version"], note["sha256"]
        except (ValueError, KeyError, TypeError) as exc:
            raise ModelNotReadyError(f"cache note {note_path} is unreadable: {exc}") from exc
        if registry_name != self.registry or name != self.model_name:
            raise ModelNotReadyError(f"cache entry {note_path} is of {name!r} at {registry_name}, "
                                     f"not of {self.model_name!r} at {self.registry}")
        actual = _sha256(graph)
        if actual != sha:
            raise ModelNotReadyError(f"cached graph {graph} has sha256 {actual[:12]}, its note says {str(sha)[:12]} "
                                     "(changed or half written); not served")
        return ServedModel(name, str(version), note.get("run_id"), graph)
