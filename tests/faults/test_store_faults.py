"""Issue 21 items 6 and 7 (the store): an old store holding the same row twice is deduplicated
by the migration and the natural key is enforced from then on; a corrupt or foreign database
file is said to be one (not mistaken for a lock), a held lock is said to be one, and `compare`
answers either in one line."""
import os
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from benchmark_runners.records import BenchmarkResult
from devicefit import store
from devicefit.reports import regression
from tests.pipelines.test_store import _row

OLD_VERSION = 5  # the schema before rows were keyed by (run_id, config_key)


def _old_store(path: Path) -> duckdb.DuckDBPyConnection:
    con = duckdb.connect(str(path))
    for version in range(1, OLD_VERSION + 1):
        for statement in store.MIGRATIONS[version]:
            con.execute(statement)
        con.execute("INSERT INTO schema_version VALUES (?, now())", [version])
    return con


def _old_load(con, source_key: str, origin: str, rows: list[dict], loaded_at: str) -> None:
    """What the old replace_source did: store every row under its source, whoever held it."""
    results = [BenchmarkResult.from_json(r) for r in rows]
    # The columns the old schema has (later migrations add some).
    have = {c for (c,) in con.execute("SELECT column_name FROM information_schema.columns WHERE table_name = 'measurements'").fetchall()}
    keep = [i for i, c in enumerate(store.MEASUREMENT_COLUMNS) if c in have]
    con.executemany(f"INSERT INTO measurements ({', '.join(store.MEASUREMENT_COLUMNS[i] for i in keep)}) "
                    f"VALUES ({', '.join('?' for _ in keep)})",
                    [[values[i] for i in keep] for values in (store._measurement_values(source_key, r) for r in results)])
    con.execute("INSERT INTO runs VALUES (?, ?, now(), 'h', NULL, NULL, NULL, ?)", [results[0].run_id, source_key, len(results)])
    con.execute("INSERT INTO sources VALUES (?, ?, NULL, NULL, ?, ?)", [source_key, origin, len(results), loaded_at])


def test_the_migration_keeps_one_copy_of_each_row_and_enforces_the_natural_key(tmp_path):
    path = tmp_path / "old.duckdb"
    con = _old_store(path)
    twice = [_row(run_id="r1"), _row("int8", run_id="r1", p50=5.0)]
    _old_load(con, "ingest:early", "ingest", twice, "2026-11-01 00:00:00")  # loaded first, but a copy
    _old_load(con, "partition:cpu|bert-tiny", "partition", twice, "2026-11-02 00:00:00")
    _old_load(con, "ingest:other", "ingest", [_row(run_id="r9")], "2026-11-03 00:00:00")
    assert con.execute("SELECT count(*) FROM measurements").fetchone()[0] == 5
    assert store.migrate(con) == list(range(OLD_VERSION + 1, store.SCHEMA_VERSION + 1))
    by_source = dict(con.execute("SELECT source_key, count(*) FROM measurements GROUP BY 1").fetchall())
    assert by_source == {"partition:cpu|bert-tiny": 2, "ingest:other": 1}  # the partition's copy is kept
    sources = {r[0]: r[1:] for r in con.execute("SELECT source_key, rows, duplicate_rows FROM sources").fetchall()}
    assert sources == {"ingest:early": (0, 2), "partition:cpu|bert-tiny": (2, 0), "ingest:other": (1, 0)}
    assert con.execute("SELECT source_key FROM runs ORDER BY 1").fetchall() == [("ingest:other",), ("partition:cpu|bert-tiny",)]
    with pytest.raises(duckdb.ConstraintException):  # from now on the key itself refuses a second copy
        _old_load(con, "ingest:late", "ingest", [_row(run_id="r1")], "2026-11-04 00:00:00")
    store.refresh_aggregates(con)
    assert {r["rows"] for r in store.aggregates(con)} == {1, 2}  # r1 and r9 measured fp32: 2 runs, 2 rows
    con.close()


def _corrupt(path: Path, how: str) -> Path:
    if how == "random bytes":
        path.write_bytes(os.urandom(64 * 1024))
    elif how == "text":
        path.write_text("this is not a database\n")
    else:  # a real database cut short
        store.init_db(path)
        data = path.read_bytes()
        path.write_bytes(data[: len(data) // 3])
    return path


@pytest.mark.parametrize("how", ["random bytes", "text", "truncated"])
@pytest.mark.parametrize("read_only", [False, True])
def test_a_corrupt_database_is_reported_as_corrupt_not_as_a_lock(tmp_path, how, read_only):
    path = _corrupt(tmp_path / "devicefit.duckdb", how)
    with pytest.raises(store.StoreError) as caught:
        store.connect(path, read_only=read_only)
    message = str(caught.value)
    assert "corrupt or not a DuckDB database" in message and str(path) in message
    assert "one writing process" not in message and "lock" not in message.lower()


def test_a_held_lock_is_reported_as_a_lock(tmp_path):
    path = tmp_path / "devicefit.duckdb"
    store.init_db(path)
    holder = subprocess.Popen([sys.executable, "-c", f"import duckdb, sys; c = duckdb.connect({str(path)!r}); "
                               "print('held', flush=True); sys.stdin.read()"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(store.StoreError, match="another process holds its lock") as caught:
            store.connect(path)
        assert "corrupt" not in str(caught.value)
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)


def test_compare_on_a_corrupt_database_is_a_one_line_error(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    _corrupt(data / "devicefit.duckdb", "random bytes")
    with pytest.raises(regression.BaselineError, match="corrupt or not a DuckDB database"):
        regression.current_sets(data / "devicefit.duckdb")
    out = subprocess.run([sys.executable, "-m", "devicefit.cli", "compare", "--baseline", "previous", "--benchmark-dir", str(data)],
                         capture_output=True, text=True, timeout=120, env={**os.environ, "DEVICEFIT_DATA_DIR": str(data)})
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr[-2000:]
    assert "corrupt or not a DuckDB database" in out.stderr


@pytest.mark.parametrize("command", [["recommendations"], ["compare-training-inference"], ["report", "--no-png"]])
def test_readers_of_a_corrupt_database_give_one_line(tmp_path, command):
    data = tmp_path / "data"
    data.mkdir()
    _corrupt(data / "devicefit.duckdb", "random bytes")
    out = subprocess.run([sys.executable, "-m", "devicefit.cli", *command, "--benchmark-dir", str(data)],
                         capture_output=True, text=True, timeout=300, env={**os.environ, "DEVICEFIT_DATA_DIR": str(data)})
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr[-2000:]
    assert "corrupt or not a DuckDB database" in out.stderr


def test_aggregates_of_a_store_never_aggregated_say_what_to_run(tmp_path):
    store.init_db(tmp_path / "db.duckdb")
    con = store.connect(tmp_path / "db.duckdb", read_only=True)
    try:
        with pytest.raises(store.StoreError, match="no aggregates yet"):
            store.aggregates(con)
    finally:
        con.close()
