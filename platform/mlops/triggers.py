"""Starting another deployable in a process of its own: through a declared trigger, a documented
`mlops` command, never a package named by module.

Monitoring starts the training pipeline when drift calls for retraining, and the demo (in
pipelines) starts the service. Neither may import the other deployable (they share a layer of
[tool.importlinter]), and spawning ``python -m mlops_cli`` is a call up the layers that the import
contracts cannot see. So each start is a typed record here, in the core that both sides import:
the arguments of a command of the ``mlops`` console script ([project.scripts]), the same command a
person or a schedule types. tests/cli/test_triggers.py parses every trigger with the command line's
own parser, so a renamed command or option fails a test, not a background process.
"""

from __future__ import annotations

import shutil
import subprocess
import sysconfig
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any, Literal

from pydantic import BaseModel, ConfigDict

from mlops.errors import ConfigError

COMMAND = "mlops"  # the console script pyproject.toml declares


class PipelineTrigger(BaseModel):
    """Run the training pipeline on a data file: ``mlops pipeline run``, or ``submit`` to a cluster."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    data: Path
    run_name: str
    submit: bool = False
    runner: Literal["kfp", "inline"] = "kfp"  # of a local run: kfp.local (a process per step) or in one process

    def args(self) -> list[str]:
        if self.submit:
            return ["pipeline", "submit", str(self.data), "--run-name", self.run_name]
        return ["pipeline", "run", str(self.data), "--run-name", self.run_name, "--runner", self.runner]


class ServeTrigger(BaseModel):
    """Serve the model holding the serving alias: ``mlops serve`` (host and port from the settings)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    def args(self) -> list[str]:
        return ["serve"]


Trigger = PipelineTrigger | ServeTrigger


def command_path() -> Path:
    """The ``mlops`` script of the running interpreter's environment, so the child runs the same install."""
    script = Path(sysconfig.get_path("scripts")) / COMMAND
    if script.is_file():
        return script
    found = shutil.which(COMMAND)
    if found is None:
        raise ConfigError(f"the {COMMAND!r} command is not installed next to {sysconfig.get_path('scripts')} "
                          "nor on PATH; install the package (make setup)")
    return Path(found)


def start(trigger: Trigger, output: IO[Any], *, env: Mapping[str, str] | None = None,
          new_session: bool = False) -> subprocess.Popen[bytes]:
    """Start ``trigger`` with stdout and stderr into ``output``; ``new_session`` outlives the caller's group."""
    return subprocess.Popen([str(command_path()), *trigger.args()], env=env, stdout=output,
                            stderr=subprocess.STDOUT, start_new_session=new_session)
