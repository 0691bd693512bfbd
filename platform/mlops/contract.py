"""The data contract: columns, dtypes, categories, ranges, features and the model's input spec.

One definition, read by ingest, validation, feature building, training, export and serving.
The bundled example is ``contracts/fraud.yaml``; ``Settings.contract_path`` points at another.
"""

from __future__ import annotations

import hashlib
import json
from datetime import timedelta
from functools import cached_property
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from mlops.contract_model import ModelSection
from mlops.errors import ConfigError
from mlops.validation_errors import first_field, one_line
from mlops.yaml_text import YAMLError, parse_yaml

Dtype = Literal["string", "datetime", "float", "int", "category"]
Aggregation = Literal["count", "mean", "max", "sum", "seconds_since_previous", "label_count", "label_rate",
                      "ratio_to_mean", "zscore", "distinct_count", "pair_seen", "pair_seconds_since_previous"]
# Aggregations of the contract's 0/1 label; they look back past a delay (FeatureSpec.delay).
LABEL_AGGREGATIONS = ("label_count", "label_rate")
# Aggregations comparing the current event's own value with the window: its column is a raw numeric
# model input, so a request carries the value.
CURRENT_VALUE_AGGREGATIONS = ("ratio_to_mean", "zscore")
# Aggregations of a key-like column (an entity key, a category, an int or string input) whose values
# the history keeps as text: how many distinct ones, and whether / how long ago the entity last met
# the current event's one. The request carries the column.
TEXT_AGGREGATIONS = ("distinct_count", "pair_seen", "pair_seconds_since_previous")
TEXT_DTYPES = ("string", "int", "category")
# Cyclic encodings of the transaction's own timestamp (UTC), computed at request time.
TimeFeature = Literal["hour_of_day_sin", "hour_of_day_cos", "day_of_week_sin", "day_of_week_cos"]
_WINDOW_UNITS = {"m": "minutes", "h": "hours", "d": "days"}


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Column(_Strict):
    name: str
    dtype: Dtype
    nullable: bool = False
    min: float | None = None
    max: float | None = None
    categories: tuple[str, ...] | None = None
    # Every value differs from every other (an id column). Exact duplicate rows are their own
    # finding (DataContract.allow_duplicate_rows), so only rows that differ count as a reuse.
    unique: bool = False
    # Spellings a source may use for 1 and 0 in a 0/1 int column (compared case-insensitively);
    # ingest maps them. Without them, a column of true/false breaks the int type check.
    true_values: tuple[str, ...] = ()
    false_values: tuple[str, ...] = ()

    @model_validator(mode="after")
    def _consistent(self) -> Column:
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError(f"column {self.name!r}: min {self.min} is greater than max {self.max}")
        if (self.dtype == "category") != (self.categories is not None):
            raise ValueError(f"column {self.name!r}: categories are required for, and only for, dtype 'category'")
        if self.true_values or self.false_values:
            if not (self.dtype == "int" and self.min == 0 and self.max == 1):
                raise ValueError(f"column {self.name!r}: true_values/false_values need dtype int with min 0, max 1")
            if not (self.true_values and self.false_values):
                raise ValueError(f"column {self.name!r}: give both true_values and false_values")
            both = sorted({v.lower() for v in self.true_values} & {v.lower() for v in self.false_values})
            if both:
                raise ValueError(f"column {self.name!r}: spellings listed as both true and false: {both}")
        return self


class Entity(_Strict):
    name: str
    join_key: str


class FeatureSpec(_Strict):
    """A window feature: at event time t it aggregates the entity's events in [t - window, t).

    ``seconds_since_previous`` is the time since the entity's latest event before t, capped at
    the window (the cap is also the value when there is no earlier event).

    Label features (``label_count``: events with a positive label, ``label_rate``: that over the
    events, 0 when none) look back past a ``delay``: at t they aggregate the events in
    [t - delay - window, t - delay), whose labels a team knows by t. Only they take a delay.

    The current value against the entity's own window (``v``: the current event's value of the
    column, a raw numeric model input the request carries; ``mean``: the window's mean, the current
    event and its instant excluded as always):

    - ``ratio_to_mean`` is ``v / mean``; 1.0 when the window is empty or its mean is 0 (only zeros:
      the column must not be negative, its ``min`` at least 0).
    - ``zscore`` is ``(v - mean) / std`` with the population standard deviation of the window; 0.0
      when the window holds fewer than 2 events or all its values are equal (min = max, an exact
      test in every engine).

    Novelty and variety over a key-like ``column`` (string, int or category; compared as text, an
    int as its decimal digits), in the same window [t - window, t):

    - ``distinct_count``: the number of distinct values of the column (missing values not counted).
    - ``pair_seen``: 1.0 when the entity had an event with the current event's value of the column
      (the pair entity-value met before, e.g. this card and this terminal), else 0.0.
    - ``pair_seconds_since_previous``: the time since the pair's latest event before t, capped at
      the window (the cap also when the pair never met, or the current value is missing).
    """

    name: str
    agg: Aggregation
    window: str = Field(pattern=r"^[1-9]\d*[mhd]$")
    column: str | None = None
    delay: str | None = Field(default=None, pattern=r"^[1-9]\d*[mhd]$")

    @cached_property
    def window_delta(self) -> timedelta:
        return _duration(self.window)

    @cached_property
    def delay_delta(self) -> timedelta:
        """The delay (zero for features that take none)."""
        return timedelta(0) if self.delay is None else _duration(self.delay)

    @property
    def is_label(self) -> bool:
        return self.agg in LABEL_AGGREGATIONS

    @property
    def uses_current_value(self) -> bool:
        """True when the value needs the current event's own value of the column."""
        return self.agg in CURRENT_VALUE_AGGREGATIONS

    @property
    def uses_text(self) -> bool:
        """True when the feature reads its column's values as text (a key-like column)."""
        return self.agg in TEXT_AGGREGATIONS

    @property
    def aggregates_window(self) -> bool:
        """True when the value depends on every event of the window (not only the latest one)."""
        return self.agg != "seconds_since_previous"

    @model_validator(mode="after")
    def _column_for_value_aggs(self) -> FeatureSpec:
        needs_column = self.agg in ("mean", "max", "sum", *CURRENT_VALUE_AGGREGATIONS, *TEXT_AGGREGATIONS)
        if needs_column and self.column is None:
            raise ValueError(f"feature {self.name!r}: aggregation {self.agg!r} needs a column")
        if not needs_column and self.column is not None:
            raise ValueError(f"feature {self.name!r}: aggregation {self.agg!r} takes no column")
        if self.is_label and self.delay is None:
            raise ValueError(f"feature {self.name!r}: aggregation {self.agg!r} needs a delay "
                             "(labels arrive late: it sees the events in [t - delay - window, t - delay))")
        if not self.is_label and self.delay is not None:
            raise ValueError(f"feature {self.name!r}: aggregation {self.agg!r} takes no delay "
                             f"(only {' and '.join(LABEL_AGGREGATIONS)} do)")
        return self


def _duration(text: str) -> timedelta:
    """``7d``, ``12h``, ``30m`` as a timedelta."""
    return timedelta(**{_WINDOW_UNITS[text[-1]]: int(text[:-1])})


class FeatureViewSpec(_Strict):
    entity: str
    features: tuple[FeatureSpec, ...]

    @property
    def view_name(self) -> str:
        """The Feast feature view holding the entity's recent events."""
        return f"{self.entity}_history"

    @cached_property
    def value_columns(self) -> list[str]:
        """Raw numeric columns whose values the view keeps per event (sorted, for a stable schema)."""
        return sorted({f.column for f in self.features if f.column and not f.uses_text})

    @cached_property
    def text_columns(self) -> list[str]:
        """Key-like columns whose values the view keeps per event as text (sorted)."""
        return sorted({str(f.column) for f in self.features if f.uses_text})

    @cached_property
    def history_horizon(self) -> timedelta:
        """How far back the kept events must reach: the longest aggregating window (a label
        feature's reaches back its delay plus its window)."""
        windows = [f.delay_delta + f.window_delta for f in self.features if f.aggregates_window]
        return max(windows, default=timedelta(0))

    @cached_property
    def uses_labels(self) -> bool:
        """True when a feature aggregates the label (the history then keeps each event's label)."""
        return any(f.is_label for f in self.features)

    @cached_property
    def current_value_columns(self) -> list[str]:
        """Columns whose current value (the event's own, from the request) a feature compares with
        the window (sorted): ``ratio_to_mean``, ``zscore`` and the pair features' columns."""
        return sorted({str(f.column) for f in self.features
                       if f.uses_current_value or (f.uses_text and f.agg != "distinct_count")})


class NumericInput(_Strict):
    name: str
    log1p: bool = False


class ModelInputs(_Strict):
    numeric: tuple[NumericInput, ...]
    categorical: tuple[str, ...] = ()
    log1p_features: tuple[str, ...] = ()


class Decisions(_Strict):
    """What an answer calls a score at or above the threshold (positive) and below it (negative)."""

    positive: str = Field(default="positive", min_length=1, max_length=32)
    negative: str = Field(default="negative", min_length=1, max_length=32)

    @model_validator(mode="after")
    def _distinct(self) -> Decisions:
        if self.positive == self.negative:
            raise ValueError(f"decisions: positive and negative are both {self.positive!r}")
        return self

    def of(self, probability: float, threshold: float) -> str:
        """The one decision rule, for every scorer: positive at or above the model's threshold."""
        return self.positive if probability >= threshold else self.negative


class DirectionalTest(_Strict):
    """A behavioural test: scaling a raw numeric input by ``factor`` (features fixed) must move the
    mean score in ``direction`` (or not lower it / not raise it)."""

    input: str
    direction: Literal["not_lower", "not_higher"]
    factor: float = Field(default=3.0, gt=0)


class Behaviour(_Strict):
    """Behavioural tests evaluate runs on the candidate, declared per data set.

    ``invariant`` fields must not change the score (the id, by default); ``directional`` tests are
    only those declared: nothing is assumed about what a column means.
    """

    invariant: tuple[str, ...] | None = None
    directional: tuple[DirectionalTest, ...] = ()


class LabelRate(_Strict):
    min: float = Field(ge=0, le=1)
    max: float = Field(ge=0, le=1)

    @model_validator(mode="after")
    def _ordered(self) -> LabelRate:
        if self.min > self.max:
            raise ValueError(f"label_rate: min {self.min} is greater than max {self.max}")
        return self


class Split(_Strict):
    validation_fraction: float = Field(gt=0, lt=0.5)
    test_fraction: float = Field(gt=0, lt=0.5)


class DataContract(_Strict):
    # Names the data set; the pipeline, experiment and registered model are named after it by default.
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")
    id_column: str
    timestamp_column: str
    label_column: str
    entities: tuple[Entity, ...]
    columns: tuple[Column, ...]
    min_rows: int = Field(default=1, ge=1)
    label_rate: LabelRate = LabelRate(min=0.0, max=1.0)
    # Meaningful only with category columns: the share of values outside a column's categories allowed.
    unknown_category_tolerance: float = Field(default=0.001, ge=0, lt=1)
    # Rows identical in every column (a file appended twice, a replayed batch) double-count events.
    allow_duplicate_rows: bool = False
    feature_views: tuple[FeatureViewSpec, ...] = ()
    time_features: tuple[TimeFeature, ...] = ()
    model_inputs: ModelInputs
    split: Split = Split(validation_fraction=0.15, test_fraction=0.15)
    decisions: Decisions = Decisions()
    behaviour: Behaviour = Behaviour()
    # What trains by default on this data set. Left out of every dump, so of the contract's fingerprint: the
    # service checks a model against the data it was trained on, not against how it was chosen (the family
    # and its params enter the training fingerprint as settings).
    model: ModelSection | None = Field(default=None, exclude=True)

    @model_validator(mode="after")
    def _references_resolve(self) -> DataContract:
        declared = [c.name for c in self.columns]
        duplicates = sorted({n for n in declared if declared.count(n) > 1})
        if duplicates:
            raise ValueError(f"columns declared more than once: {duplicates}")
        names = set(declared)
        entity_names = {e.name for e in self.entities}
        wanted = [self.id_column, self.timestamp_column, self.label_column]
        wanted += [e.join_key for e in self.entities]
        wanted += [n.name for n in self.model_inputs.numeric] + list(self.model_inputs.categorical)
        wanted += [f.column for v in self.feature_views for f in v.features if f.column]
        missing = sorted({w for w in wanted if w not in names})
        if missing:
            raise ValueError(f"contract references undeclared columns: {missing}")
        unknown_entities = sorted({v.entity for v in self.feature_views} - entity_names)
        if unknown_entities:
            raise ValueError(f"feature views name undeclared entities: {unknown_entities}")
        feature_names = [f.name for v in self.feature_views for f in v.features] + list(self.time_features)
        clashes = sorted({f for f in feature_names if feature_names.count(f) > 1 or f in names})
        if clashes:
            raise ValueError(f"feature names must be unique and differ from columns: {clashes}")
        bad_log = sorted(set(self.model_inputs.log1p_features) - set(feature_names))
        if bad_log:
            raise ValueError(f"log1p_features names unknown features: {bad_log}")
        for name in self.model_inputs.categorical:
            if self.column(name).dtype != "category":
                raise ValueError(f"categorical model input {name!r} is not a category column")
        self._check_keys()
        self._check_behaviour()
        return self

    def _check_keys(self) -> None:
        for name in (self.id_column, *(e.join_key for e in self.entities)):
            if self.column(name).dtype not in ("string", "int"):
                raise ValueError(f"id or entity key column {name!r} must have dtype string or int")

    def _check_behaviour(self) -> None:
        raw_numeric = {n.name for n in self.model_inputs.numeric}
        bad = sorted({t.input for t in self.behaviour.directional} - raw_numeric)
        if bad:
            raise ValueError(f"behaviour.directional names inputs that are not raw numeric model inputs: {bad}")
        undeclared = sorted(set(self.behaviour.invariant or ()) - {c.name for c in self.columns})
        if undeclared:
            raise ValueError(f"behaviour.invariant names undeclared columns: {undeclared}")

    @model_validator(mode="after")
    def _current_values_are_request_inputs(self) -> DataContract:
        """A feature of the current value reads it from the request: its column is a raw numeric
        model input (a ratio's column is never negative)."""
        raw = {n.name for n in self.model_inputs.numeric}
        for feature in (f for v in self.feature_views for f in v.features if f.uses_current_value):
            if feature.column not in raw:
                raise ValueError(f"feature {feature.name!r}: {feature.agg} compares the request's own value of "
                                 f"{feature.column!r}, so it must be a raw numeric model input "
                                 "(model_inputs.numeric)")
            low = self.column(str(feature.column)).min
            if feature.agg == "ratio_to_mean" and (low is None or low < 0):
                raise ValueError(f"feature {feature.name!r}: ratio_to_mean needs a column that is never "
                                 f"negative (min >= 0); {feature.column!r} has min {low}")
        carried = {*self.raw_inputs, *(e.join_key for e in self.entities)}
        for feature in (f for v in self.feature_views for f in v.features if f.uses_text):
            column = self.column(str(feature.column))
            if column.name not in carried or column.dtype not in TEXT_DTYPES:
                raise ValueError(f"feature {feature.name!r}: {feature.agg} needs a key-like column the request "
                                 f"carries (an entity key or a raw model input of dtype string, int or "
                                 f"category); {column.name!r} is not")
        return self

    def column(self, name: str) -> Column:
        for col in self.columns:
            if col.name == name:
                return col
        raise KeyError(name)

    def entity(self, name: str) -> Entity:
        for ent in self.entities:
            if ent.name == name:
                return ent
        raise KeyError(name)

    @cached_property
    def feature_names(self) -> list[str]:
        """Every computed model input: window features per view, then the time features."""
        return [f.name for v in self.feature_views for f in v.features] + list(self.time_features)

    @cached_property
    def feature_bounds(self) -> dict[str, tuple[float | None, float | None]]:
        """The range each computed feature lies in, whatever the history (None: unbounded that way).

        Counts and gaps are never negative and a gap is capped at its window; a mean or max lies in
        its column's range or is 0 (an empty window); a sum is at least min(0, the column's min);
        cyclic time features lie in [-1, 1].
        """
        bounds: dict[str, tuple[float | None, float | None]] = {}
        for feature in (f for v in self.feature_views for f in v.features):
            if feature.agg in ("count", "label_count"):
                bounds[feature.name] = (0.0, None)
            elif feature.agg == "label_rate":
                bounds[feature.name] = (0.0, 1.0)
            elif feature.agg == "seconds_since_previous":
                bounds[feature.name] = (0.0, feature.window_delta.total_seconds())
            elif feature.agg in ("distinct_count", "pair_seen"):
                bounds[feature.name] = (0.0, 1.0 if feature.agg == "pair_seen" else None)
            elif feature.agg == "pair_seconds_since_previous":
                bounds[feature.name] = (0.0, feature.window_delta.total_seconds())
            elif feature.agg == "ratio_to_mean":  # a non-negative value over a positive mean (or 1)
                bounds[feature.name] = (0.0, None)
            elif feature.agg == "zscore":
                bounds[feature.name] = (None, None)
            else:
                column = self.column(str(feature.column))
                low = None if column.min is None else min(0.0, column.min)
                high = None if column.max is None or feature.agg == "sum" else max(0.0, column.max)
                bounds[feature.name] = (low, high)
        bounds.update((name, (-1.0, 1.0)) for name in self.time_features)
        return bounds

    @cached_property
    def numeric_inputs(self) -> list[str]:
        """Model's numeric inputs in graph order: raw request fields, then computed features."""
        return [n.name for n in self.model_inputs.numeric] + self.feature_names

    @cached_property
    def log1p_mask(self) -> list[bool]:
        raw = {n.name for n in self.model_inputs.numeric if n.log1p}
        logged = raw | set(self.model_inputs.log1p_features)
        return [name in logged for name in self.numeric_inputs]

    @cached_property
    def raw_inputs(self) -> list[str]:
        """Model inputs a request carries itself (the rest are computed from history and time)."""
        return [n.name for n in self.model_inputs.numeric] + list(self.model_inputs.categorical)

    @cached_property
    def fingerprint(self) -> str:
        """sha256 of the contract's canonical JSON: a model exported under another contract differs."""
        canonical = json.dumps(self.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()

    @cached_property
    def invariant_fields(self) -> list[str]:
        """Fields the score must not depend on: the declared ones, or the id column."""
        declared = self.behaviour.invariant
        return list(declared) if declared is not None else [self.id_column]

    def key_is_int(self, name: str) -> bool:
        """Whether an id or entity key column holds integers (keys keep the contract's dtype)."""
        return self.column(name).dtype == "int"

    @cached_property
    def request_fields(self) -> list[str]:
        """Fields a prediction request carries: id, entity keys, timestamp, model's raw inputs."""
        keys = [e.join_key for e in self.entities]
        return [self.id_column, *keys, self.timestamp_column, *self.raw_inputs]


def load_contract(path: Path) -> DataContract:
    """Read and check a contract file; a bad file raises :class:`ConfigError` naming the problem."""
    try:
        raw = parse_yaml(Path(path).read_text())
    except FileNotFoundError as exc:
        raise ConfigError(f"contract file not found: {path}") from exc
    except YAMLError as exc:
        raise ConfigError(f"contract file {path} is not valid YAML: {exc}") from exc
    try:
        return DataContract.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(f"contract file {path} is invalid: {one_line(exc)}", field=first_field(exc)) from exc
