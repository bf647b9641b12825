"""The table assets: polars frames read from the store, stored back by the store_tables IO manager
(DuckDBPolarsIOManager on the store) and loaded as downstream inputs. On real rows of another
machine (benchmarks/datasets/xeon-spr-2c-calibrated), without measuring anything here."""
import shutil
from pathlib import Path

import dagster as dg
import duckdb
import polars as pl
import pytest

from assets.resources import STORE_TABLES, devicefit_resources
from assets.store_tables import PartitionedTableRefused, StoreFrameHandler, StoreTablesClient
from devicefit import store
from devicefit.landing import load_landing_files
from devicefit.paths import DataPaths
from devicefit.pipeline import refresh_aggregates
from pipelines.definitions import defs

SEED = Path(__file__).resolve().parents[2] / "benchmarks" / "datasets" / "xeon-spr-2c-calibrated"


@pytest.fixture(scope="module")
def seeded(tmp_path_factory) -> DataPaths:
    paths = DataPaths(tmp_path_factory.mktemp("seeded"))
    paths.raw.mkdir(parents=True)
    for f in SEED.glob("partition__*.json"):
        shutil.copy(f, paths.raw / f.name)
    report = load_landing_files(paths.database, paths.raw)
    assert report.rows_loaded > 100 and not report.quarantined
    refresh_aggregates(paths)
    return paths


def test_the_aggregate_frame_is_the_aggregates_table(seeded):
    with store.opened(seeded.database, read_only=True) as con:
        assert store.rows_of(store.aggregate_frame(con)) == store.aggregates(con)


def test_the_training_frame_is_the_stored_ok_rows_without_their_samples(seeded):
    with store.opened(seeded.database, read_only=True) as con:
        frame, rows = store.training_frame(con), store.ok_measurements(con)
    assert frame.height == len(rows) and not set(store.frames.TRAINING_EXCLUDED) & set(frame.columns)
    trimmed = [{k: v for k, v in r.items() if k not in store.frames.TRAINING_EXCLUDED} for r in rows]
    assert store.rows_of(frame) == trimmed  # same rows, same order, JSON decoded alike


def test_features_from_the_training_frame_equal_those_from_the_store(seeded):
    """What the predictors fit on is the same whether the rows come from the frame or the store
    (the sample lists the frame leaves out are not read by training)."""
    from benchmark_runners.hardware import detect_hardware
    from devicefit.predict.hardware_specs import training_specs
    from devicefit.predict.training import specs_per_device, training_data

    with store.opened(seeded.database, read_only=True) as con:
        frame_rows, store_rows, hardware = store.rows_of(store.training_frame(con)), store.ok_measurements(con), store.hardware_rows(con)
    specs, _ = training_specs(store_rows, hardware, detect_hardware(probe=False).to_json())
    a = training_data(frame_rows, specs_per_device(frame_rows, specs))
    b = training_data(store_rows, specs_per_device(store_rows, specs))
    assert len(a) == len(b) > 100 and a.skipped == b.skipped
    assert a.features == b.features and a.models == b.models
    assert all((a.actual[t] == b.actual[t]).all() for t in a.actual) and (a.memory_reference == b.memory_reference).all()


def _undo_12_and_13(con) -> None:
    """Back to a store at schema version 10, as far as 11 to 13 can tell (13's columns cannot be
    dropped under the natural-key index; the migration adds them only where they are missing)."""
    con.execute("DROP TABLE devices")
    con.execute("DELETE FROM schema_version WHERE version >= 11")


def test_migration_11_renames_the_old_aggregates_table_or_drops_it_beside_a_newer_one(seeded, tmp_path):
    path = tmp_path / "old.duckdb"
    shutil.copy(seeded.database, path)
    con = duckdb.connect(str(path))
    rows = store.aggregates(con)
    con.execute("ALTER TABLE aggregated_results RENAME TO aggregates")
    _undo_12_and_13(con)
    assert store.migrate(con) == list(range(11, store.SCHEMA_VERSION + 1))
    assert store.aggregates(con) == rows and "aggregates" not in store.table_counts(con)
    # An older store whose new table was written before it was migrated: the stale one goes.
    con.execute("CREATE TABLE aggregates AS SELECT 1 AS stale")
    _undo_12_and_13(con)
    assert store.migrate(con) == list(range(11, store.SCHEMA_VERSION + 1))
    assert store.aggregates(con) == rows and "aggregates" not in store.table_counts(con)
    con.close()


def test_the_training_frame_survives_its_round_trip_through_the_store(seeded):
    """What the predictors receive: the frame stored by the IO manager and loaded back (JSON
    columns come back as text, lists and timestamps as they were)."""
    from assets.results import training_frame

    seen = {}

    @dg.asset
    def consumer(training_frame: pl.DataFrame) -> None:
        seen["rows"] = store.rows_of(training_frame)

    assert dg.materialize([training_frame, consumer], resources=devicefit_resources(str(seeded.root))).success
    with store.opened(seeded.database, read_only=True) as con:
        expected = [{k: v for k, v in r.items() if k not in store.frames.TRAINING_EXCLUDED} for r in store.ok_measurements(con)]
    assert seen["rows"] == expected and len(expected) > 100


# --- The IO manager ----------------------------------------------------------------------------

def test_a_frame_is_stored_as_the_assets_table_and_loaded_as_the_input(tmp_path):
    seen = {}

    @dg.asset(io_manager_key=STORE_TABLES)
    def a_table() -> pl.DataFrame:
        return pl.DataFrame({"name": ["x", "y"], "ok": [True, None], "tags": [["a"], []], "v": [1.5, 2.0]})

    @dg.asset
    def reader(a_table: pl.DataFrame) -> None:
        seen["frame"] = a_table

    resources = devicefit_resources(str(tmp_path))
    result = dg.materialize([a_table, reader], resources=resources)
    assert result.success
    assert seen["frame"].equals(pl.DataFrame({"name": ["x", "y"], "ok": [True, None], "tags": [["a"], []], "v": [1.5, 2.0]}))
    with store.opened(DataPaths(tmp_path).database, read_only=True) as con:
        assert con.execute("SELECT name, v FROM main.a_table ORDER BY name").fetchall() == [("x", 1.5), ("y", 2.0)]
    metadata = result.asset_materializations_for_node("a_table")[0].metadata
    assert metadata["dagster/row_count"].value == 2 and metadata["dagster/table_name"].value == "main.a_table"
    assert {c.name: c.type for c in metadata["dagster/column_schema"].value.columns}["tags"] == "VARCHAR[]"


def test_a_new_column_list_and_an_empty_frame_replace_the_table(tmp_path):
    frames = iter([pl.DataFrame({"a": [1, 2]}), pl.DataFrame({"b": ["z"], "a": [3]}), pl.DataFrame(schema={"c": pl.Float64})])

    @dg.asset(io_manager_key=STORE_TABLES)
    def shifting() -> pl.DataFrame:
        return next(frames)

    resources = devicefit_resources(str(tmp_path))
    database = DataPaths(tmp_path).database
    expected = [[("a", "BIGINT")], [("b", "VARCHAR"), ("a", "BIGINT")], [("c", "DOUBLE")]]
    for columns in expected:
        assert dg.materialize([shifting], resources=resources).success
        with store.opened(database, read_only=True) as con:
            assert store.table_columns(con, "shifting") == columns  # the stock manager would insert into the old columns
    with store.opened(database, read_only=True) as con:
        assert con.execute("SELECT count(*) FROM shifting").fetchone()[0] == 0  # an empty frame still leaves its table


def test_a_failed_write_leaves_the_previous_table(tmp_path, monkeypatch):
    values = iter([[1, 2, 3], [7]])

    @dg.asset(io_manager_key=STORE_TABLES)
    def kept() -> pl.DataFrame:
        return pl.DataFrame({"a": next(values)})

    resources = devicefit_resources(str(tmp_path))
    assert dg.materialize([kept], resources=resources).success

    replace = StoreFrameHandler.handle_output

    def replace_then_fail(self, context, table_slice, obj, connection):
        replace(self, context, table_slice, obj, connection)
        raise OSError("simulated failure after the table was replaced, before the commit")

    monkeypatch.setattr(StoreFrameHandler, "handle_output", replace_then_fail)
    assert not dg.materialize([kept], resources=resources, raise_on_error=False).success
    with store.opened(DataPaths(tmp_path).database, read_only=True) as con:
        assert con.execute("SELECT list(a ORDER BY a) FROM kept").fetchone()[0] == [1, 2, 3]


def test_a_partitioned_table_asset_is_refused_by_name(tmp_path):
    @dg.asset(io_manager_key=STORE_TABLES, partitions_def=dg.StaticPartitionsDefinition(["p"]), metadata={"partition_expr": "a"})
    def sliced() -> pl.DataFrame:
        return pl.DataFrame({"a": [1]})

    result = dg.materialize([sliced], partition_key="p", resources=devicefit_resources(str(tmp_path)), raise_on_error=False)
    assert not result.success
    [failure] = [e for e in result.all_events if e.is_step_failure]
    error = failure.step_failure_data.error
    assert (error.cause or error).cls_name == PartitionedTableRefused.__name__ and "unpartitioned tables only" in error.to_string()


def test_a_frame_may_not_replace_one_of_the_stores_own_tables(tmp_path):
    @dg.asset(io_manager_key=STORE_TABLES)
    def measurements() -> pl.DataFrame:
        return pl.DataFrame({"a": [1]})

    database = DataPaths(tmp_path).database
    store.init_db(database)
    result = dg.materialize([measurements], resources=devicefit_resources(str(tmp_path)), raise_on_error=False)
    assert not result.success
    [failure] = [e for e in result.all_events if e.is_step_failure]
    assert "refusing to replace the store's own table 'measurements'" in failure.step_failure_data.error.to_string()
    with store.opened(database, read_only=True) as con:
        assert "model" in dict(store.table_columns(con, "measurements"))


def test_loads_open_the_store_read_only(tmp_path):
    database = DataPaths(tmp_path).database
    store.init_db(database)
    context = dg.build_input_context(resource_config={"database": str(database), "connection_config": {}, "schema": None})
    with StoreTablesClient.connect(context, None) as con:
        with pytest.raises(duckdb.Error, match="read-only"):
            con.execute("CREATE TABLE written (a INTEGER)")


def test_downstream_assets_take_the_tables_as_inputs_not_deps():
    inputs = {key: set(defs.resolve_assets_def(key).keys_by_input_name)
              for key in ("selection_map", "benchmark_reports", "latency_predictor")}
    assert "compatibility_matrix" in inputs["selection_map"]
    assert "aggregated_results" in inputs["benchmark_reports"]
    assert "training_frame" in inputs["latency_predictor"]
    for key in ("aggregated_results", "compatibility_matrix", "training_frame"):
        assert defs.resolve_assets_def(key).get_io_manager_key_for_asset_key(dg.AssetKey(key)) == STORE_TABLES
