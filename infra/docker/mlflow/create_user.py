"""Create (or re-password) one user of MLflow's basic-auth app through its REST API, as the admin.

The one-shot `mlflow-users` of docker-compose.yml, and the Job `mlflow-serving-user` (at install)
and the CronJob `mlflow-serving-user-sync` (every 10 minutes) of the Kubernetes manifests run it in
the MLflow image (standard library only); the native stack's supervisor (`make stack`) runs this
same file for its service's user on every start. The user gets no grant:
what it may do is the auth config's default_permission (READ), so the prediction service reads the
registry and cannot write to it. Passwords come from files or the environment, never argv:

    MLFLOW_TRACKING_URI                 the server, e.g. http://mlflow:5000
    MLFLOW_TRACKING_USERNAME            the admin
    MLFLOW_TRACKING_PASSWORD[_FILE]     the admin's password (or a file holding it)
    MLFLOW_NEW_USERNAME                 the user to create
    MLFLOW_NEW_PASSWORD_FILE            a file holding its password

A user who already signs in with the file's password is left alone ('unchanged': one GET as that
user, nothing written); any other existing user gets the file's password ('updated': a rotated
secret takes effect on the next run); a missing one is created ('created'). Only the user's name and
that word are printed, never a password. Waits up to MLFLOW_WAIT_S seconds (default 120) for the
server's /health. Exit 0 when done, 1 otherwise.
"""

from __future__ import annotations

import base64
import json
import os
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path


def _secret(name: str) -> str:
    """The value of NAME, else the stripped content of the file NAME_FILE names."""
    if os.environ.get(name):
        return os.environ[name]
    path = os.environ.get(f"{name}_FILE")
    if not path:
        raise SystemExit(f"create_user: set {name} or {name}_FILE")
    return Path(path).read_text().strip()


def _call(url: str, method: str, auth: tuple[str, str], body: dict[str, str] | None = None) -> tuple[int, str]:
    token = base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method,
                                     headers={"Authorization": f"Basic {token}", "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def _wait(base: str, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while True:
        try:
            with urllib.request.urlopen(f"{base}/health", timeout=5):
                return
        except (urllib.error.URLError, OSError) as error:
            if time.monotonic() > deadline:
                raise SystemExit(f"create_user: {base} not healthy after {seconds:.0f} s: {error}") from error
            time.sleep(2)


def signs_in(base: str, username: str, password: str) -> bool:
    """Whether USERNAME signs in with PASSWORD: it reads its own user record (any other answer than
    200, 401 above all, means no)."""
    query = urllib.parse.urlencode({"username": username})
    status, _ = _call(f"{base}/api/2.0/mlflow/users/get?{query}", "GET", (username, password))
    return status == 200


def ensure_user(base: str, admin: tuple[str, str], username: str, password: str) -> str:
    """Leave USERNAME alone if PASSWORD already signs it in, else create it or set its password;
    returns 'unchanged', 'created' or 'updated'."""
    if signs_in(base, username, password):
        return "unchanged"
    body = {"username": username, "password": password}
    status, text = _call(f"{base}/api/2.0/mlflow/users/create", "POST", admin, body)
    if status == 200:
        return "created"
    if "RESOURCE_ALREADY_EXISTS" not in text:
        raise SystemExit(f"create_user: creating {username} answered {status}: {text[:300]}")
    status, text = _call(f"{base}/api/2.0/mlflow/users/update-password", "PATCH", admin, body)
    if status != 200:
        raise SystemExit(f"create_user: updating {username}'s password answered {status}: {text[:300]}")
    return "updated"


def main() -> int:
    base = os.environ["MLFLOW_TRACKING_URI"].rstrip("/")
    admin = (os.environ["MLFLOW_TRACKING_USERNAME"], _secret("MLFLOW_TRACKING_PASSWORD"))
    username = os.environ["MLFLOW_NEW_USERNAME"]
    password = Path(os.environ["MLFLOW_NEW_PASSWORD_FILE"]).read_text().strip()
    if not password:
        raise SystemExit("create_user: the new user's password file is empty")
    _wait(base, float(os.environ.get("MLFLOW_WAIT_S", "120")))
    print(f"create_user: {username} {ensure_user(base, admin, username, password)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
