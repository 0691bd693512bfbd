"""Which model the service answers with: follow a registry alias, load new versions in the
background, swap atomically, and keep the old model whenever the new one is not fit to serve.

A request reads :attr:`ModelManager.current` once and keeps that object, so it finishes on the
model it started with while a swap happens. A version that fails to download or load, or that
was exported under another data contract, is refused and counted; the old one keeps serving.
The registry being unreachable never unloads a model. The last model served per alias is cached
under ``<home>/serving/cache``, per registry (serving.model_cache), so a replica started during a
registry outage serves it and says so: when the registry has not answered within
``registry_startup_timeout_s`` the cached model is served while the first load goes on, and the
registry's answer replaces it whenever it comes.
"""

from __future__ import annotations

import logging
import shutil
import threading
import zlib
from dataclasses import dataclass
from pathlib import Path

import httpx

from mlops import registry
from mlops.contract import DataContract
from mlops.errors import MLOpsError, ModelNotReadyError, PromotionConflictError, RegistryError
from mlops.inference import OnnxModel
from mlops.served_registry import served_registry
from serving.metrics import ServiceMetrics
from serving.model_cache import ModelCache
from serving.settings import ServingSettings

log = logging.getLogger(__name__)

FALLBACK_ALIAS = "fallback"
CHALLENGER_ALIAS = "challenger"
_UNCACHED = (CHALLENGER_ALIAS, registry.CANARY_ALIAS)  # only the served alias' model is cached


@dataclass(frozen=True)
class LoadedModel:
    """A model ready to score: the graph, where it came from, and which alias it was loaded for."""

    served: registry.ServedModel
    model: OnnxModel
    alias: str
    from_cache: bool = False


@dataclass(frozen=True)
class Canary:
    """The canary's model and its share of the traffic, sticky per key (a CRC-32, the same in every process)."""

    loaded: LoadedModel
    percent: float

    def takes(self, key: str) -> bool:
        return zlib.crc32(key.encode()) % 10_000 < self.percent * 100


def registry_answers(tracking_uri: str, timeout_s: float) -> bool:
    """False when an HTTP tracking server does not answer at all (refused, unresolvable, silent) within
    ``timeout_s``; any answer, an error status included, and any other kind of store count as answering."""
    if not tracking_uri.startswith(("http://", "https://")):
        return True
    try:
        httpx.get(f"{tracking_uri.rstrip('/')}/health", timeout=timeout_s)
    except httpx.TransportError:
        return False
    return True


class ModelManager:
    """Holds the served (and optional challenger) model and follows the registry; thread-safe."""

    def __init__(self, settings: ServingSettings, contract: DataContract, workdir: Path,
                 metrics: ServiceMetrics) -> None:
        self.settings = settings
        self.contract = contract
        self.workdir = workdir
        self.metrics = metrics
        self.alias = settings.serving_alias
        self.current: LoadedModel | None = None
        self.challenger: LoadedModel | None = None
        self.canary: Canary | None = None
        self.last_error = ""  # why the newest version is not served (or why none is), for the operator
        self._refused: tuple[str, str] | None = None  # (alias, version) that failed: not retried every poll
        self._refresh_lock = threading.Lock()
        self._swap_lock = threading.Lock()  # the cached model never replaces one the registry gave
        self._stop = threading.Event()
        self._poller: threading.Thread | None = None
        self._registry = served_registry(settings)
        self._cache = ModelCache(settings.resolved_home / "serving" / "cache", settings.resolved_tracking_uri,
                                 settings.model_name)

    def require(self) -> LoadedModel:
        current = self.current
        if current is None:
            raise ModelNotReadyError(self.last_error or f"no model loaded for alias {self.alias!r}",
                                     public=f"no model loaded for alias {self.alias!r} yet")
        return current

    def start(self) -> None:
        """Load what the alias holds now, or the cached model when the registry fails or is slow.

        The registry is read through mlops.served_registry (SQL on the embedded store, REST on a
        server: no MLflow in the process); a missing SQLite store fails at once. An HTTP registry
        that does not answer its /health at all is known down within the start timeout: the cached
        model is served at once and the poller loads the registry's when it answers. Otherwise the
        first load runs in a thread: a registry that hangs must not hold the replica unready, and
        whatever that load brings replaces the cache.
        """
        timeout = self.settings.registry_startup_timeout_s
        if not registry_answers(self.settings.resolved_tracking_uri, timeout):
            self._load_cached(f"registry unreachable at start (no answer from {self._cache.registry} "
                              f"within {timeout:g} s)")
        if self.current is None:
            outcome: list[RegistryError | None] = []
            first = threading.Thread(target=lambda: outcome.append(self.refresh()), name="model-first-load",
                                     daemon=True)
            first.start()
            first.join(timeout)
            if self.current is None and not outcome and not self._cache.holds(self.alias):
                # Nothing cached to serve meanwhile: a slow registry (a loaded machine's SQLite store
                # took 3 s) is waited for, as before the cache, rather than a replica ready with no model.
                first.join()
            if self.current is None and (not outcome or outcome[0] is not None):
                self._load_cached(f"registry unreachable at start (no answer within {timeout:g} s)" if not outcome
                                  else "registry unreachable at start")

    def start_polling(self) -> None:
        """Re-read the registry every poll interval from now on (called once the service is ready:
        a poll's first MLflow import, for a store read through MLflow, must not compete with the
        start-up of a replica on its cache)."""
        self._poller = threading.Thread(target=self._poll, name="model-poller", daemon=True)
        self._poller.start()

    def stop(self) -> None:
        self._stop.set()
        if self._poller is not None:
            self._poller.join()
        self._registry.close()

    def follow(self, alias: str) -> LoadedModel:
        """Serve ``alias`` from now on; the old model keeps serving if the alias' version cannot be loaded."""
        with self._refresh_lock:
            try:
                version = self._registry.alias_version(alias)
            except MLOpsError as exc:
                raise RegistryError(f"cannot switch to alias {alias!r}: {exc.message}",
                                    public=f"the model registry did not answer; still serving {self.alias!r}") from exc
            if version is None:
                raise PromotionConflictError(f"no version holds alias {alias!r}; still serving {self.alias!r}")
            current = self.current
            if current is not None and current.alias == alias and current.served.version == version:
                return current
            loaded = self._load(alias, version)
            self.alias = alias
            self._swap(loaded)
            return loaded

    def refresh(self, *, retry_refused: bool = False) -> RegistryError | None:
        """Re-read the followed alias (and the challenger's) and load what changed; never raises.

        Returns the registry's failure when it could not be read (what is loaded keeps serving).
        """
        with self._refresh_lock:
            if retry_refused:
                self._refused = None
            outage = self._refresh_serving()
            if outage is None:  # in an outage the loaded canary stays as it is
                self._refresh_canary()
            if self.settings.shadow:
                self._refresh_challenger()
            return outage

    def _refresh_serving(self) -> RegistryError | None:
        alias = self.alias
        try:
            version = self._registry.alias_version(alias)
        except MLOpsError as exc:
            self.last_error = f"registry unreachable, serving what is loaded: {exc.message}"
            log.warning("%s", self.last_error)
            return RegistryError(self.last_error, public=f"the model registry did not answer; still serving "
                                 f"{self.current.served.version if self.current else 'no model'}")
        if version is None:
            self.last_error = (f"no version of {self.settings.model_name!r} holds alias {alias!r} yet; "
                               "run the pipeline first (mlops pipeline run)")
            return None
        current = self.current
        if current is not None and current.served.version == version and not current.from_cache:
            self.last_error = ""
            return None
        if self._refused == (alias, version):
            return None
        try:
            loaded = self._load(alias, version)
        except MLOpsError as exc:
            self._refused = (alias, version)
            self.last_error = f"version {version} of alias {alias!r} not served: {exc.message}"
            log.error("%s", self.last_error)
            return None
        self._swap(loaded)
        return None

    def _refresh_challenger(self) -> None:
        try:
            version = self._registry.alias_version(CHALLENGER_ALIAS)
            if version is None:
                self.challenger = None
            elif self.challenger is None or self.challenger.served.version != version:
                self.challenger = self._load(CHALLENGER_ALIAS, version)
        except MLOpsError as exc:
            log.warning("challenger not refreshed: %s", exc.message)

    def _refresh_canary(self) -> None:
        try:
            running = self._registry.canary()
            if running is None:
                self.canary = None
                return
            version, percent = running
            current = self.canary
            if current is None or current.loaded.served.version != version:
                self.canary = Canary(self._load(registry.CANARY_ALIAS, version), percent)
            elif current.percent != percent:
                self.canary = Canary(current.loaded, percent)
        except MLOpsError as exc:  # an outage keeps the canary that is loaded
            log.warning("canary not refreshed: %s", exc.message)

    def _load(self, alias: str, version: str) -> LoadedModel:
        """Download and open ``version``; refuse it when it was exported under another contract."""
        try:
            dest = self.workdir / f"v{version}"
            shutil.rmtree(dest, ignore_errors=True)
            served = self._registry.download_version(version, dest)
            model = self._open(served)
        except MLOpsError:
            self.metrics.reload_failed()
            raise
        if alias not in _UNCACHED:
            self._write_cache(alias, served)
        return LoadedModel(served, model, alias)

    def _open(self, served: registry.ServedModel) -> OnnxModel:
        try:
            model = OnnxModel(served.onnx_path)
        except Exception as exc:  # onnxruntime raises its own untyped errors for a corrupt graph
            raise ModelNotReadyError(f"cannot load {served.onnx_path.name}: {type(exc).__name__}: {exc}") from exc
        exported_under = model.metadata.get("contract_sha256")
        if exported_under is not None and exported_under != self.contract.fingerprint:
            raise ModelNotReadyError(f"version {served.version} was exported under another data contract "
                                     f"({exported_under[:12]}, service has {self.contract.fingerprint[:12]})")
        expected = set(self.contract.raw_inputs) | set(self.contract.feature_names)
        unknown = sorted(set(model.input_names) - expected)
        if unknown or "threshold" not in model.metadata:
            raise ModelNotReadyError(f"version {served.version} does not fit the contract: inputs {unknown} "
                                     "unknown or no threshold in its metadata")
        return model

    def _swap(self, loaded: LoadedModel) -> None:
        with self._swap_lock:
            previous = self.current
            if loaded.from_cache and previous is not None:
                return  # the registry answered first
            self.current = loaded  # one reference assignment: a request sees the old or the new model, whole
        self.last_error = ""
        self.metrics.serving(loaded.served.name, loaded.served.version, loaded.alias, from_cache=loaded.from_cache)
        served = loaded.served
        source = (f"the cache {served.onnx_path}" if loaded.from_cache
                  else f"the registry (models:/{served.name}/{served.version}, run {served.run_id})")
        log.info("serving %s version %s (alias %s) from %s on %s; was %s", served.name, served.version,
                 loaded.alias, source, ", ".join(loaded.model.providers),
                 previous.served.version if previous else "none")

    def _write_cache(self, alias: str, served: registry.ServedModel) -> None:
        try:
            self._cache.write(alias, served)
        except OSError as exc:  # a full or read-only disk costs the next outage its cache, not this load
            log.error("model cache not written under %s: %s", self._cache.folder, exc)

    def _load_cached(self, why: str) -> None:
        try:
            served = self._cache.read(self.alias)
            if served is None:
                log.warning("%s and no cached model of %s for alias %r under %s", why, self._cache.registry,
                            self.alias, self._cache.folder)
                return
            model = self._open(served)
        except MLOpsError as exc:
            log.error("cached model not usable: %s", exc.message)
            return
        self._swap(LoadedModel(served, model, self.alias, from_cache=True))
        if self.current is not None and self.current.from_cache:
            self.last_error = f"{why}; serving the cached model until it answers"
            log.warning("%s (version %s of %s)", self.last_error, served.version, self._cache.registry)

    def _poll(self) -> None:
        while not self._stop.wait(self.settings.model_poll_interval_s):
            self.refresh()
