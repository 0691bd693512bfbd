"""YAML parsed by libyaml's C parser where PyYAML was built with it (its pure-Python parser otherwise).

The contract file is read whenever settings or a contract are made (its name, its ``model:`` section,
the contract itself): about 5 ms a read in Python, 0.6 ms in C, the same documents either way.
"""

from __future__ import annotations

from typing import Any

import yaml

YAMLError = yaml.YAMLError
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def parse_yaml(text: str) -> Any:
    """``yaml.safe_load(text)``: plain data only (no Python objects), a :class:`YAMLError` when malformed."""
    return yaml.load(text, Loader=_LOADER)  # a safe loader, C or Python
