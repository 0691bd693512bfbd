"""Fixtures of the core's tests: one local SparkSession for the whole session."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """One local SparkSession (two cores, no UI, one shuffle partition). Its Python workers run this
    interpreter, so they import the project (Spark would start `python3`)."""
    from pyspark.sql import SparkSession

    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.skip("needs a JVM for pyspark: apt-get install -y openjdk-17-jre-headless "
                    "(.ci/system-packages.sh, run by make test, installs it as root)")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # read once, when the context starts
    session = (SparkSession.builder.master("local[2]").appName("mlops-tests")
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "1")
               .config("spark.sql.execution.arrow.pyspark.enabled", "true")
               .config("spark.driver.bindAddress", "127.0.0.1")
               .config("spark.driver.host", "127.0.0.1")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
