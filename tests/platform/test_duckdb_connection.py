"""The DuckDB engine's connections: one database per process shared by its uses, each use on its own
cursor with its own memory limit and spill folder, the memory a use freed returned when it ends, a
database that spilled replaced, none across a fork."""

from __future__ import annotations

import os
from pathlib import Path

import duckdb
import pandas as pd
import pytest

from mlops.backfill import duckdb_engine
from mlops.backfill.duckdb_engine import connection

pytestmark = pytest.mark.unit


def _setting(con: duckdb.DuckDBPyConnection, name: str) -> str:
    [(value,)] = con.sql(f"SELECT current_setting('{name}')").fetchall()
    return str(value)


def test_uses_share_a_database_but_not_what_each_registered(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    opened: list[dict[str, object]] = []
    real_connect = duckdb.connect

    def counted(**config: object) -> duckdb.DuckDBPyConnection:
        opened.append(config)
        return real_connect(**config)  # type: ignore[arg-type]

    monkeypatch.setattr(duckdb, "connect", counted)
    duckdb_engine._close_idle()
    with connection(tmp_path / "a.spill", "200MB") as con:
        con.register("queries", pd.DataFrame({"x": [1, 2]}))
        con.execute("CREATE TEMP TABLE scratch AS SELECT 1 AS y")
        assert con.sql("SELECT sum(x) FROM queries").fetchall() == [(3,)]
        assert _setting(con, "memory_limit").startswith("190")  # 200 MB in MiB
    assert not (tmp_path / "a.spill").exists()
    with connection(tmp_path / "b.spill", "300MB") as con:
        for name in ("queries", "scratch"):
            with pytest.raises(duckdb.CatalogException):
                con.sql(f"SELECT * FROM {name}").fetchall()
        assert _setting(con, "temp_directory") == str(tmp_path / "b.spill")
        assert _setting(con, "memory_limit").startswith("286")
    assert len(opened) == 1


def test_a_database_that_spilled_is_replaced_and_the_next_use_spills_where_it_is_told(tmp_path: Path) -> None:
    duckdb_engine._close_idle()
    sort = "SELECT x FROM (SELECT range AS x, hash(range) AS h FROM range(2000000)) ORDER BY h LIMIT 1"
    with connection(tmp_path / "first.spill", "30MB") as con:
        con.execute("SET threads = 1")
        con.execute(f"CREATE TEMP TABLE big AS {sort.replace(' LIMIT 1', '')}")
        assert any((tmp_path / "first.spill").iterdir()), "the sort did not spill: the test proves nothing"
    with connection(tmp_path / "second.spill", "30MB") as con:  # DuckDB would refuse to switch the first's folder
        assert _setting(con, "temp_directory") == str(tmp_path / "second.spill")
        assert len(con.sql(sort).fetchall()) == 1


def _resident_mb() -> int:
    status = Path("/proc/self/status").read_text()
    return int(next(line for line in status.splitlines() if line.startswith("VmRSS:")).split()[1]) // 1024


def test_an_idle_database_returns_the_memory_its_use_freed(tmp_path: Path) -> None:
    duckdb_engine._close_idle()
    with connection(tmp_path / "big.spill", "1GB") as con:
        con.execute("CREATE TEMP TABLE big AS SELECT range AS x, hash(range) AS h FROM range(8000000)")
        con.sql("SELECT count(*) FROM (SELECT x FROM big ORDER BY h)").fetchall()
        in_use = _resident_mb()
    assert duckdb_engine._idle, "the database was not kept for the next use"
    # Without the idle limit the allocator kept it all (about 150 MB here): the process stayed at its peak.
    assert _resident_mb() < in_use - 100


def test_a_forked_child_inherits_no_open_database(tmp_path: Path) -> None:
    with connection(tmp_path / "parent.spill", "100MB") as con:
        con.sql("SELECT 1").fetchall()
    pid = os.fork()
    if pid == 0:
        os._exit(0 if not duckdb_engine._idle else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    with connection(tmp_path / "after.spill", "100MB") as con:  # the parent opens a fresh one
        assert con.sql("SELECT 42").fetchall() == [(42,)]
