"""The pipeline reaches DuckDB through dagster-duckdb's DuckDBResource: while another process
holds the write lock, a connection is retried until it is free instead of failing at once."""
import subprocess
import sys
import time

import pytest

from assets.resources import READ_ONLY, StoreDuckDB, devicefit_resources
from devicefit import store

HOLD = """
import sys, time, duckdb
con = duckdb.connect(sys.argv[1])
con.execute("CREATE TABLE IF NOT EXISTS t (x INTEGER)")
print("holding", flush=True)
time.sleep(float(sys.argv[2]))
con.close()
"""


def test_a_reader_waits_for_a_writer_in_another_process_instead_of_failing(tmp_path):
    database = tmp_path / "devicefit.duckdb"
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(database), "2.5"], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "holding"
        with pytest.raises(store.StoreError, match="another process holds its lock"):
            store.connect(database, read_only=True)  # a hand-made connect fails at once
        started = time.monotonic()
        with StoreDuckDB(database=str(database), connection_config=READ_ONLY).get_connection() as con:
            assert con.execute("SELECT count(*) FROM t").fetchone() == (0,)
        assert time.monotonic() - started > 0.5  # it waited for the holder to finish
    finally:
        holder.kill()
        holder.wait()


def test_the_store_resource_opens_the_data_directory_in_force(tmp_path, monkeypatch):
    monkeypatch.setenv("DEVICEFIT_DATA_DIR", str(tmp_path / "late"))
    resources = devicefit_resources()  # as the code location builds them, before any data dir is known
    with resources["duckdb"].get_connection() as con:
        con.execute("CREATE TABLE t (x INTEGER)")
    assert (tmp_path / "late" / "devicefit.duckdb").is_file()
    with resources["duckdb_reader"].get_connection() as con:
        with pytest.raises(Exception, match="read-only"):
            con.execute("INSERT INTO t VALUES (1)")


def test_an_asset_that_fails_inside_the_block_leaves_no_connection_open(tmp_path):
    """dagster-duckdb closes its connection only on a clean exit; left open, the next plain
    connect in the same process (the `devicefit run` summary) fails on DuckDB's "different
    configuration" check."""
    resource = StoreDuckDB(database=str(tmp_path / "devicefit.duckdb"))
    with pytest.raises(RuntimeError, match="asset failed"):
        with resource.get_connection() as con:
            con.execute("CREATE TABLE t (x INTEGER)")
            raise RuntimeError("asset failed")
    con = store.connect(tmp_path / "devicefit.duckdb", read_only=True)
    assert con.execute("SELECT count(*) FROM t").fetchone() == (0,)
    con.close()


def test_run_config_moving_the_data_directory_alone_is_refused_not_split(tmp_path, monkeypatch):
    """Run config (the UI's launchpad) may set `devicefit_data`'s data_dir alone: benchmark_results
    then loaded that directory's landing files into DEVICEFIT_DATA_DIR's store (and published its
    outputs beside the other). Refused naming both; with the DuckDB resources moved too, it loads."""
    import shutil

    import dagster as dg

    from devicefit.landing import write_landing
    from pipelines.definitions import defs
    from tests.pipelines.test_store import _doc, _row

    there, default = tmp_path / "there", tmp_path / "default"
    write_landing(there / "raw", "partition:cpu|bert-tiny", _doc([_row()]))
    monkeypatch.setenv("DEVICEFIT_DATA_DIR", str(default))
    job = defs.resolve_job_def("results_job")
    moved = {"devicefit_data": {"config": {"data_dir": str(there)}}}
    with dg.instance_for_test() as instance:
        result = job.execute_in_process(instance=instance, run_config={"resources": moved}, raise_on_error=False,
                                        asset_selection=[dg.AssetKey("benchmark_results")])
        assert not result.success and not (default / "devicefit.duckdb").exists()
        [failure] = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
        assert "DuckDB resource opens" in str(failure.event_specific_data.error)
        database = {"config": {"database": str(there / "devicefit.duckdb")}}
        both = {**moved, "duckdb": database, "duckdb_reader": database}
        result = job.execute_in_process(instance=instance, run_config={"resources": both}, raise_on_error=False,
                                        asset_selection=[dg.AssetKey("benchmark_results")])
        assert result.success
    con = store.connect(there / "devicefit.duckdb", read_only=True)
    assert con.execute("SELECT count(*) FROM measurements").fetchone() == (1,)
    con.close()
    shutil.rmtree(default, ignore_errors=True)


def test_run_config_moving_the_store_but_not_the_table_io_manager_is_refused(tmp_path, monkeypatch):
    """With devicefit_data, duckdb and duckdb_reader moved to another directory and store_tables
    left at its default, aggregated_results wrote its table into DEVICEFIT_DATA_DIR's store (and
    the assets downstream read it from there). Refused naming both; moved too, it is stored there."""
    import dagster as dg

    from devicefit.landing import write_landing
    from pipelines.definitions import defs
    from tests.pipelines.test_store import _doc, _row

    there, default = tmp_path / "there", tmp_path / "default"
    write_landing(there / "raw", "partition:cpu|bert-tiny", _doc([_row()]))
    monkeypatch.setenv("DEVICEFIT_DATA_DIR", str(default))
    job = defs.resolve_job_def("results_job")
    database = {"config": {"database": str(there / "devicefit.duckdb")}}
    moved = {"devicefit_data": {"config": {"data_dir": str(there)}}, "duckdb": database, "duckdb_reader": database}
    selection = [dg.AssetKey("benchmark_results"), dg.AssetKey("aggregated_results")]
    with dg.instance_for_test() as instance:
        result = job.execute_in_process(instance=instance, run_config={"resources": moved}, raise_on_error=False,
                                        asset_selection=selection)
        assert not result.success and not (default / "devicefit.duckdb").exists()
        [failure] = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
        assert "store_tables" in str(failure.event_specific_data.error) and str(default) in str(failure.event_specific_data.error)
        result = job.execute_in_process(instance=instance, run_config={"resources": {**moved, "store_tables": database}},
                                        raise_on_error=False, asset_selection=selection)
        assert result.success
    con = store.connect(there / "devicefit.duckdb", read_only=True)
    assert con.execute("SELECT count(*) FROM aggregated_results").fetchone()[0] >= 1
    con.close()
