"""Which of the native stack's Debian server programs are missing here (the stack tests skip without them)."""

from __future__ import annotations

import pytest

from mlops.errors import StackError
from native_stack.config import server_binary


def missing_binaries() -> list[str]:
    missing = []
    for name in ("initdb", "postgres", "psql", "redis-server", "prometheus", "prometheus-pushgateway"):
        try:
            server_binary(name)
        except StackError:
            missing.append(name)
    return missing


_MISSING = missing_binaries()
NEEDS_SERVERS = pytest.mark.skipif(bool(_MISSING), reason=f"needs {', '.join(_MISSING)} (apt-get install -y "
                                   "postgresql redis-server prometheus prometheus-pushgateway)")
