"""Request and response models of the prediction API, generated from the data contract.

The contract is the one definition of the fields, so a new category or range in the contract
changes what the API accepts without a code change. Both models forbid unknown fields: a typo in
a field name is a 422, not a silently ignored value.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import AwareDatetime, BaseModel, BeforeValidator, ConfigDict, Field, create_model

from mlops.contract import DataContract
from mlops.features import compute_features

_KEY_MAX_LENGTH = 128  # ids and join keys are short codes; bounding them bounds the work per request
_CATEGORY_MAX_LENGTH = 64


def _key_type(contract: DataContract, name: str) -> Any:
    """An id or entity key as the contract declares it: an integer (strict: "12" is a client bug, as a
    string id given as 12 is) or a short string."""
    if contract.key_is_int(name):
        return Annotated[int, Field(strict=True, ge=-(2**63), lt=2**63)]
    return Annotated[str, Field(min_length=1, max_length=_KEY_MAX_LENGTH)]


def _numeric_type(contract: DataContract, name: str) -> Any:
    column = contract.column(name)
    # strict: "12.5" or true is a client bug, not a number; allow_inf_nan: the graph needs finite inputs.
    return Annotated[float, Field(strict=True, allow_inf_nan=False, ge=column.min, le=column.max)]


def _categorical_type() -> Any:
    # A category the contract does not list is scored in the graph's "unknown" bucket, and the
    # answer names the field in `unknown_categories` (monitoring counts them).
    return Annotated[str, Field(min_length=1, max_length=_CATEGORY_MAX_LENGTH)]


def _date_time_text(value: Any) -> Any:
    # pydantic reads a number as seconds since the epoch; the schema says an RFC 3339 string.
    if value is not None and not isinstance(value, str):
        raise ValueError("must be an RFC 3339 date-time string")
    return value


def build_request_model(contract: DataContract) -> type[BaseModel]:
    """The body of ``POST /predict``: one transaction's request fields, typed and bounded."""
    fields: dict[str, Any] = {contract.id_column: (_key_type(contract, contract.id_column), ...)}
    for entity in contract.entities:
        fields[entity.join_key] = (_key_type(contract, entity.join_key), ...)
    # Absent: the transaction happens now (the time the service received it).
    fields[contract.timestamp_column] = (Annotated[AwareDatetime | None, BeforeValidator(_date_time_text)], None)
    for numeric in contract.model_inputs.numeric:
        fields[numeric.name] = (_numeric_type(contract, numeric.name), ...)
    for name in contract.model_inputs.categorical:
        fields[name] = (_categorical_type(), ...)
    return create_model("PredictionRequest", __config__=ConfigDict(extra="forbid"), **fields)


_EXAMPLE_AMOUNT = 42.5  # a plain purchase; moved into a numeric input's [min, max] when it falls outside


def _example_key(contract: DataContract, name: str, number: int) -> int | str:
    """An id of the contract's dtype: an integer, or a short code of the usual shape (C000042 for customer_id)."""
    if contract.key_is_int(name):
        return number
    return f"{name[:1].upper()}{number:06d}"


def request_example(contract: DataContract) -> dict[str, Any]:
    """A valid ``POST /predict`` body drawn from the contract, for the OpenAPI document (Swagger's
    "Try it out"): ids of the declared dtype, each categorical input's first listed category (never
    an unknown one), numbers inside their declared range, and no event time (the service uses now)."""
    example: dict[str, Any] = {contract.id_column: _example_key(contract, contract.id_column, 1)}
    for number, entity in enumerate(contract.entities, start=42):
        example[entity.join_key] = _example_key(contract, entity.join_key, number)
    for numeric in contract.model_inputs.numeric:
        column = contract.column(numeric.name)
        value = _EXAMPLE_AMOUNT if column.max is None else min(_EXAMPLE_AMOUNT, column.max)
        example[numeric.name] = float(value if column.min is None else max(value, column.min))
    for name in contract.model_inputs.categorical:
        categories = contract.column(name).categories or ("unknown",)
        example[name] = categories[0]
    return example


def infer_example(contract: DataContract, moment: datetime) -> dict[str, Any]:
    """A valid Open Inference Protocol body for the same row as :func:`request_example`: one tensor per
    graph input, in the graph's order, the computed features those of an entity with no history yet
    (its first transaction at ``moment``)."""
    raw = request_example(contract)
    features = compute_features(contract, {}, moment, raw)
    row = {**raw, **features}
    numeric = [{"name": name, "shape": [1, 1], "datatype": "FP32", "data": [float(row[name])]}
               for name in contract.numeric_inputs]
    text = [{"name": name, "shape": [1, 1], "datatype": "BYTES", "data": [str(row[name])]}
            for name in contract.model_inputs.categorical]
    return {"inputs": numeric + text}


def build_response_model(contract: DataContract) -> type[BaseModel]:
    """The body of a successful prediction; the id field is named like the contract's id column."""
    fields: dict[str, Any] = {
        contract.id_column: (int if contract.key_is_int(contract.id_column) else str, ...),
        "request_id": (str, Field(description="The X-Request-ID given, or the one the service assigned.")),
        "probability": (float, Field(ge=0.0, le=1.0)),
        "decision": (Literal[contract.decisions.positive, contract.decisions.negative], Field(  # type: ignore[valid-type]
            description=f"{contract.decisions.positive!r} when probability >= threshold, "
                        f"else {contract.decisions.negative!r}.")),
        "threshold": (float, ...),
        "model_name": (str, ...),
        "model_version": (str, ...),
        contract.timestamp_column: (AwareDatetime, Field(description="The event time the features were computed at.")),
        "unknown_entities": (list[str], Field(
            description="Entities with no earlier transaction, scored with the empty-window defaults.")),
        "unknown_categories": (list[str], Field(
            description="Fields whose category the contract does not list (scored as unknown).")),
        "retry": (bool, Field(description="True when this id was answered before: the answer is computed at the "
                                          "first copy's event time (given back above), from the same events.")),
        "features_exact": (bool, Field(description="False when the event is older than the online histories reach "
                                                   "back (the longest window plus the lateness allowance before the "
                                                   "entity's newest event): its window features miss pruned events.")),
    }
    return create_model("PredictionResponse", __config__=ConfigDict(extra="forbid"), **fields)


class HealthResponse(BaseModel):
    model_config = ConfigDict(extra="forbid")

    status: Literal["ok"] = "ok"
    model_name: str
    model_version: str
    registry: str = Field(description="The tracking store the version is of (its URI without credentials): a "
                                      "version is named by its registry and its number, never its number alone.")
    serving_alias: str
    source: Literal["registry", "cache"] = Field(
        description="cache: the registry was unreachable at start; the last model served is used.")
    warning: str = Field(default="", description="Why a newer version is not served, if one is not.")


MAX_BATCH = 256


def build_batch_models(request_model: type[BaseModel], response_model: type[BaseModel]) -> tuple[
        type[BaseModel], type[BaseModel]]:
    """Bodies of ``POST /predict/batch``: up to MAX_BATCH transactions in, answers in the same order."""
    batch_request = create_model(
        "BatchPredictionRequest", __config__=ConfigDict(extra="forbid"),
        instances=(list[request_model], Field(min_length=1, max_length=MAX_BATCH)))  # type: ignore[valid-type]
    batch_response = create_model(
        "BatchPredictionResponse", __config__=ConfigDict(extra="forbid"),
        predictions=(list[response_model], ...))  # type: ignore[valid-type]
    return batch_request, batch_response
