"""Settings as MLOPS_* variables, for the processes that cannot be handed the object.

kfp.local's step processes, torchrun's training processes and the services a demo starts read
their settings from the environment; the inline runner hands its steps the settings themselves.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager

from pydantic import SecretStr

from mlops.settings import Settings


def settings_env(settings: Settings) -> dict[str, str]:
    """The settings as MLOPS_* variables, with paths made absolute for the step processes."""
    # Tuples travel as JSON, the form pydantic-settings parses back; secrets as themselves, not masked.
    dumped = settings.model_dump(mode="json", exclude_none=True)
    for name in dumped:
        value = getattr(settings, name)
        if isinstance(value, SecretStr):
            dumped[name] = value.get_secret_value()
    env = {f"MLOPS_{k.upper()}": v if isinstance(v, str) else json.dumps(v) for k, v in dumped.items()}
    env["MLOPS_HOME"] = str(settings.resolved_home)
    env["MLOPS_CONTRACT_PATH"] = str(settings.contract_path.expanduser().resolve())
    return env


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
