"""The feature engine: the one interface the columnar offline jobs run through.

An engine computes, from the contract's definitions, the backfill (every row's point-in-time
features), each entity's latest state (what materialization merges into the online store) and
the batch scoring pass (a model's probability per backfilled row). Engines register under a name;
``Settings.feature_engine`` names the one a process uses, and :func:`engine_for` builds it. Adding
an engine is one subclass with :func:`register_engine` on it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, TypeVar

from mlops.contract import DataContract, FeatureViewSpec
from mlops.errors import ConfigError
from mlops.histories import History
from mlops.settings import Settings

if TYPE_CHECKING:
    import pyarrow as pa

    from mlops.inference import OnnxModel


PROBABILITY = "probability"


@dataclass(frozen=True)
class Scored:
    """A scoring pass: the Parquet file or folder to read in record batches, and what turns one of
    its batches into a table with the model's :data:`PROBABILITY` column (float64)."""

    source: Path
    with_probability: Callable[[pa.RecordBatch], pa.Table]


class FeatureEngine(ABC):
    """Backfill, latest state and batch scoring, all from the contract's feature definitions."""

    name: ClassVar[str]

    def __init__(self, settings: Settings) -> None:
        self.settings = settings  # each engine reads its own settings (memory, cluster) from here

    @abstractmethod
    def backfill(self, source: Path, out: Path, contract: DataContract) -> None:
        """Write every row of ``source`` (Parquet file or folder) with one float64 column per contract
        feature to ``out`` (one Parquet file)."""

    @abstractmethod
    def latest_histories(self, offline: Path, contract: DataContract, view: FeatureViewSpec, end: datetime,
                         start: datetime | None, *, batch: int) -> Iterator[list[tuple[str, History]]]:
        """(entity, history as of ``end``) of every entity of ``view`` with an event after ``start``
        in the ``offline`` table, ``batch`` entities at a time."""

    @abstractmethod
    def score(self, features: Path, model: OnnxModel, work: Path, contract: DataContract) -> Scored:
        """The scoring pass of ``model`` over ``features`` (a backfill's output); ``work`` is a
        scratch folder the caller removes."""


ENGINES: dict[str, type[FeatureEngine]] = {}
E = TypeVar("E", bound=type[FeatureEngine])


def register_engine(engine: E) -> E:
    """Class decorator: make ``engine`` choosable as ``feature_engine=<engine.name>``."""
    if engine.name in ENGINES and ENGINES[engine.name] is not engine:
        raise ConfigError(f"a feature engine named {engine.name!r} is registered already")
    ENGINES[engine.name] = engine
    return engine


def engine_for(settings: Settings) -> FeatureEngine:
    """The registered engine ``settings.feature_engine`` names, built from the settings (importing
    this module runs :mod:`mlops.backfill`, which registers the bundled engines)."""
    engine = ENGINES.get(settings.feature_engine)
    if engine is None:
        known = ", ".join(sorted(ENGINES))
        raise ConfigError(f"unknown feature engine {settings.feature_engine!r}; registered: {known}",
                          field="feature_engine")
    return engine(settings)
