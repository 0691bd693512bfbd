"""Log lines of a step or training process (KFP shows them per task): ours at INFO, libraries' at WARNING."""

from __future__ import annotations

import logging


def configure_logging() -> None:
    """Log lines of a step process (KFP shows them per task): ours at INFO, libraries' at WARNING."""
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(levelname)s %(message)s",
                        force=True)
    for name in ("mlops", "pipelines"):
        logging.getLogger(name).setLevel(logging.INFO)
