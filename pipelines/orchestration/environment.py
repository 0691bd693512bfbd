"""Settings for the processes that cannot be handed the object.

kfp.local's step processes and torchrun's training processes get one serialized settings record
(:func:`record_env`, read back by the settings classes themselves); the services a demo starts
and the commands a test starts get MLOPS_* variables (:func:`settings_env`), as a person would set
them. The inline runner hands its steps the settings themselves.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager

from mlops.settings import SETTINGS_RECORD_VARIABLE, Settings, settings_record


def settings_env(settings: Settings) -> dict[str, str]:
    """The settings as MLOPS_* variables: the record's values (secrets as themselves, paths absolute)."""
    # Tuples travel as JSON, the form pydantic-settings parses back; an unset setting stays unset.
    values = json.loads(settings_record(settings))
    return {f"MLOPS_{key.upper()}": value if isinstance(value, str) else json.dumps(value)
            for key, value in values.items() if value is not None}


def record_env(settings: Settings) -> dict[str, str]:
    """The settings as the one variable a step process or training rank reads them from."""
    return {SETTINGS_RECORD_VARIABLE: settings_record(settings)}


@contextmanager
def environment(values: dict[str, str]) -> Iterator[None]:
    """``values`` in os.environ for the block, the previous values back after it."""
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, old in saved.items():
            if old is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = old
