"""``python -m mlops_cli``: the ``mlops`` command, for processes started without the console script."""

from mlops_cli.app import app

app()
