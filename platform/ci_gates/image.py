"""The image gate: ``docker build -f serving/Dockerfile .`` from the repository root.

Where no Docker engine runs (no ``docker`` executable, or one whose daemon does not answer) the
build cannot be tried: the gate says which of the two it met and fails, or skips when asked to
(``--without-docker skip``); a FAIL is the default because a build that never ran never passed.
The GitHub workflow's image job runs on a runner with an engine, so there the build is real.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path
from typing import Literal

from ci_gates.make_targets import summary_line
from ci_gates.outcome import GateOutcome, failed, passed, skipped

GATE = "image"
DOCKERFILE = "serving/Dockerfile"
WithoutDocker = Literal["fail", "skip"]


def image_gate(repo_root: Path, log_dir: Path, *, tag: str = "mlops-serving:gate",
               without_docker: WithoutDocker = "fail") -> GateOutcome:
    checked = f"docker build -f {DOCKERFILE} -t {tag} ."
    docker = shutil.which("docker")
    if docker is None:
        return _no_engine(checked, "no docker executable on PATH", without_docker)
    engine = subprocess.run([docker, "version", "--format", "{{.Server.Version}}"], capture_output=True, text=True,
                            check=False)
    if engine.returncode != 0:
        return _no_engine(checked, f"the Docker engine does not answer ({summary_line(engine.stderr)})",
                          without_docker)
    log_dir.mkdir(parents=True, exist_ok=True)
    log = log_dir / f"{GATE}.log"
    started = time.monotonic()
    with log.open("w") as sink:
        code = subprocess.run([docker, "build", "-f", DOCKERFILE, "-t", tag, "."], cwd=repo_root, stdout=sink,
                              stderr=subprocess.STDOUT, check=False).returncode
    checked = f"{checked} on engine {engine.stdout.strip()}: exit {code} after {time.monotonic() - started:.0f} s"
    if code != 0:
        return failed(GATE, checked, f"the build failed: {summary_line(log.read_text(errors='replace'))}", log)
    return passed(GATE, checked)


def _no_engine(checked: str, why: str, without_docker: WithoutDocker) -> GateOutcome:
    if without_docker == "skip":
        return skipped(GATE, checked, f"not built: {why} (--without-docker skip)")
    return failed(GATE, checked, f"not built: {why}; the GitHub workflow builds it, or pass --without-docker skip")
