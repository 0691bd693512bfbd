"""A throwaway redis-server for the tests that need Redis (the online store, the entities' locks):
its configuration, password included, arrives on stdin, so nothing of it reaches a file or `ps`."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

REDIS_SERVER = shutil.which("redis-server")
REDIS_MISSING = ("needs redis-server from Debian: apt-get install -y redis-server "
                 "(.ci/system-packages.sh, run by make test, installs it as root)")
_START_TIMEOUT_S = 30


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextmanager
def redis_server(folder: Path, password: str | None = None) -> Iterator[str]:
    """Run redis-server (no persistence) until the block ends; its URL, once it answers a ping."""
    import redis

    port = _free_port()
    assert REDIS_SERVER is not None, REDIS_MISSING
    server = subprocess.Popen([REDIS_SERVER, "-"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)
    assert server.stdin is not None
    auth = f"requirepass {password}\n" if password else ""
    server.stdin.write(f"bind 127.0.0.1\nport {port}\nsave \"\"\nappendonly no\ndir {folder}\n{auth}".encode())
    server.stdin.close()
    url = f"redis://{f':{password}@' if password else ''}127.0.0.1:{port}/0"
    try:
        deadline = time.monotonic() + _START_TIMEOUT_S
        while True:
            try:
                redis.Redis.from_url(url).ping()
                break
            except redis.ConnectionError:
                assert time.monotonic() < deadline, "redis-server did not start"
                time.sleep(0.1)
        yield url
    finally:
        server.terminate()
        server.wait(timeout=30)
