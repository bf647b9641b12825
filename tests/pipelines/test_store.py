"""The DuckDB store: migrations, status, per-source replacement, aggregates."""
import json

import duckdb
import pytest

from benchmark_runners.records import BenchmarkConfig, BenchmarkResult
from devicefit import store
from devicefit.results_io import results_document


def _row(precision="fp32", device="cpu", p50=10.0, run_id="r1", batch=1, hostname="h") -> dict:
    samples = [p50 * 0.99, p50, p50 * 1.01] * 4
    backend = "openvino" if device.startswith("openvino") else "torch"
    cfg = BenchmarkConfig("bert-tiny", device=device, backend=backend, precision=precision, batch_size=batch)
    return BenchmarkResult.for_config(
        cfg, run_id, "2026-11-22T00:00:00+00:00", "ok", None, samples_ms=samples, p50_ms=p50, mean_ms=p50,
        iterations=len(samples), throughput_samples_per_s=batch * len(samples) * 1000 / sum(samples), ci_rel_half_width=0.01,
        ci_target=0.02, family="embedding", parameters=4385920, input={"dims": {"seq_length": 128}},
        environment={"hostname": hostname}).to_json()


def _doc(rows):
    return {**results_document("r1", [], {}), "results": rows}


def test_init_is_idempotent_and_versioned(tmp_path):
    path = tmp_path / "db.duckdb"
    assert store.init_db(path) == list(range(1, store.SCHEMA_VERSION + 1))
    assert store.init_db(path) == []
    assert store.status(path)["schema_version"] == store.SCHEMA_VERSION


def test_status_of_a_missing_database_says_what_to_do(tmp_path):
    with pytest.raises(store.StoreError, match="devicefit db init"):
        store.status(tmp_path / "nope.duckdb")


def test_a_newer_schema_is_refused(tmp_path):
    path = tmp_path / "db.duckdb"
    store.init_db(path)
    con = duckdb.connect(str(path))
    con.execute("INSERT INTO schema_version VALUES (99, now())")
    with pytest.raises(store.StoreError, match="newer than this devicefit"):
        store.migrate(con)


def test_every_result_field_has_a_column(tmp_path):
    con = store.connect(tmp_path / "db.duckdb")
    store.migrate(con)
    columns = {r[0] for r in con.execute("SELECT column_name FROM information_schema.columns WHERE table_name = 'measurements'").fetchall()}
    assert set(store.MEASUREMENT_COLUMNS) <= columns


def test_replacing_a_source_never_duplicates(tmp_path):
    con = store.connect(tmp_path / "db.duckdb")
    store.migrate(con)
    for _ in range(3):
        store.replace_source(con, "partition:cpu|bert-tiny", "partition", _doc([_row(), _row("int8", p50=5.0)]))
    assert con.execute("SELECT count(*) FROM measurements").fetchone()[0] == 2
    store.replace_source(con, "ingest:x", "ingest", _doc([_row(run_id="r2", p50=12.0)]))
    assert con.execute("SELECT count(*) FROM measurements").fetchone()[0] == 3


def test_aggregates_median_speedup_and_best_precision(tmp_path):
    con = store.connect(tmp_path / "db.duckdb")
    store.migrate(con)
    store.replace_source(con, "a", "partition", _doc([_row(p50=10.0, run_id="r1"), _row("int8", p50=4.0, run_id="r1")]))
    store.replace_source(con, "b", "ingest", _doc([_row(p50=14.0, run_id="r2"), _row("int8", p50=6.0, run_id="r2")]))
    store.refresh_aggregates(con)
    rows = {r["precision"]: r for r in store.query(con, "SELECT * FROM aggregated_results")}
    assert rows["fp32"]["runs"] == 2 and rows["fp32"]["p50_ms"] == pytest.approx(12.0)
    assert rows["int8"]["speedup_vs_cpu_fp32"] == pytest.approx(12.0 / 5.0)
    assert rows["fp32"]["speedup_vs_cpu_fp32"] == pytest.approx(1.0)
    assert rows["fp32"]["best_precision"] == "int8" and rows["int8"]["is_best_precision"]


def test_speedup_needs_a_cpu_baseline_on_the_same_host(tmp_path):
    con = store.connect(tmp_path / "db.duckdb")
    store.migrate(con)
    store.replace_source(con, "gpu", "ingest", _doc([_row(device="cuda:0", p50=1.0, hostname="gpu-host")]))
    store.refresh_aggregates(con)
    [row] = store.query(con, "SELECT * FROM aggregated_results")
    assert row["speedup_vs_cpu_fp32"] is None  # no CPU fp32 measured on gpu-host: no invented baseline


def test_two_machines_with_one_hostname_are_two_hosts(tmp_path):
    """Two VMs both called "vm" (as the shared datasets' machines are): their rows are told apart
    by the CPU fingerprint of the document that brought them, never averaged together, and each
    host's OpenVINO rows are compared with that host's own torch CPU baseline."""
    def doc(rows, cpu_fingerprint):
        return {**_doc(rows), "hardware": {"platforms": {"cpu": {"devices": [{"fingerprint": cpu_fingerprint}]}}}}

    con = store.connect(tmp_path / "db.duckdb")
    store.migrate(con)
    store.replace_source(con, "amd", "ingest", doc([_row(p50=20.0, run_id="r1", hostname="vm"),
                                                    _row(device="openvino:CPU", p50=10.0, run_id="r1", hostname="vm")], "cpu-amd"))
    store.replace_source(con, "xeon", "ingest", doc([_row(p50=8.0, run_id="r2", hostname="vm"),
                                                     _row(device="openvino:CPU", p50=2.0, run_id="r2", hostname="vm")], "cpu-xeon"))
    assert {h for (h,) in con.execute("SELECT host_fingerprint FROM measurements").fetchall()} == {"cpu-amd", "cpu-xeon"}
    store.refresh_aggregates(con)
    rows = {(r["host"], r["device_kind"]): r for r in store.query(con, "SELECT * FROM aggregated_results")}
    assert rows[("cpu-amd", "cpu")]["p50_ms"] == 20.0 and rows[("cpu-xeon", "cpu")]["p50_ms"] == 8.0
    assert rows[("cpu-amd", "openvino")]["speedup_vs_cpu_fp32"] == pytest.approx(2.0)
    assert rows[("cpu-xeon", "openvino")]["speedup_vs_cpu_fp32"] == pytest.approx(4.0)


def test_two_gpus_behind_one_host_cpu_are_two_devices(tmp_path):
    """An H100 box and an H200 box of one cloud have the same host CPU (one fingerprint), as the
    shared datasets' GPU machines do: their rows stay two devices, told apart by the GPU's own
    fingerprint, in the aggregates (never one median) and in the predictors' device keys, and each
    is compared with that host CPU's baseline. The CPU and what runs on it keep the host's key."""
    from devicefit.predict.hardware_specs import is_profiled, row_device

    def gpu(p50, name, fingerprint, run_id):
        row = _row(device="cuda:0", p50=p50, run_id=run_id, hostname="vm")
        return {**row, "device_name": name, "hardware_fingerprint": fingerprint}

    def doc(rows):
        return {**_doc(rows), "hardware": {"platforms": {"cpu": {"devices": [{"fingerprint": "cpu-xeon"}]}}}}

    con = store.connect(tmp_path / "db.duckdb")
    store.migrate(con)
    store.replace_source(con, "h100", "ingest", doc([gpu(3.0, "NVIDIA H100", "cuda-h100", "r1"),
                                                     {**_row(p50=30.0, run_id="r1", hostname="vm"), "hardware_fingerprint": "cpu-xeon"}]))
    store.replace_source(con, "h200", "ingest", doc([gpu(2.0, "NVIDIA H200", "cuda-h200", "r2")]))
    store.refresh_aggregates(con)
    gpus = {r["accelerator"]: r for r in store.query(con, "SELECT * FROM aggregated_results WHERE device_kind = 'cuda'")}
    assert set(gpus) == {"cuda-h100", "cuda-h200"}
    assert gpus["cuda-h100"]["p50_ms"] == 3.0 and gpus["cuda-h200"]["p50_ms"] == 2.0 and gpus["cuda-h200"]["runs"] == 1
    assert gpus["cuda-h100"]["speedup_vs_cpu_fp32"] == pytest.approx(10.0)
    assert gpus["cuda-h200"]["speedup_vs_cpu_fp32"] == pytest.approx(15.0)
    [cpu] = store.query(con, "SELECT * FROM aggregated_results WHERE device_kind = 'cpu'")
    assert cpu["accelerator"] is None and cpu["host"] == "cpu-xeon"

    keys = {r["hardware_fingerprint"]: row_device(r) for r in store.ok_measurements(con)}
    assert keys == {"cuda-h100": "cuda@cpu-xeon+cuda-h100", "cuda-h200": "cuda@cpu-xeon+cuda-h200", "cpu-xeon": "cpu@cpu-xeon"}
    assert not is_profiled(keys["cuda-h100"]) and is_profiled("cpu@cpu-xeon+t1")
    # What runs on the host's CPU is that CPU's, whatever its own fingerprint says.
    on_cpu = {"device_kind": "openvino", "host_fingerprint": "cpu-xeon", "hardware_fingerprint": "openvino-1"}
    software = {"device_kind": "webgpu", "host_fingerprint": "cpu-xeon", "hardware_fingerprint": "webgpu-1",
                "backend_config": {"software_adapter": True}}
    assert row_device(on_cpu) == "openvino@cpu-xeon" and row_device(software) == "webgpu@cpu-xeon"
    assert row_device({**software, "backend_config": {}}) == "webgpu@cpu-xeon+webgpu-1"


def test_two_machines_openvino_rows_are_two_devices_whenever_their_files_were_written(tmp_path):
    """The AMD EPYC's and the Xeon's landing files (written before device ids on the host's CPU
    were host-qualified) both name OpenVINO's CPU plugin openvino-4ebbcabb1705. Loaded, each
    machine's rows are its own device: two device ids, two registered devices with their own
    hosts, and each config's previous run is its own machine's. A store that loaded such files
    before is brought to the same state by its migration."""
    from devicefit.reports.regression import compare, current_sets, previous_sets

    plain = "openvino-4ebbcabb1705"

    def doc(host, run_id, p50, ts):
        row = {**_row(device="openvino:CPU", p50=p50, run_id=run_id), "hardware_fingerprint": plain, "timestamp": ts}
        return {**_doc([row]), "hardware": {"platforms": {"cpu": {"devices": [{"name": host, "fingerprint": host}]},
                                                          "openvino": {"devices": [{"name": "CPU", "fingerprint": plain}]}}}}

    def state(con):
        rows = con.execute("SELECT host_fingerprint, hardware_fingerprint, device_id FROM measurements ORDER BY ALL").fetchall()
        devices = con.execute("SELECT id, host_fingerprint FROM devices WHERE kind = 'openvino' ORDER BY id").fetchall()
        history = con.execute("SELECT DISTINCT hardware_fingerprint FROM sample_history WHERE device_kind = 'openvino' ORDER BY 1").fetchall()
        described = con.execute("SELECT fingerprint, name FROM hardware WHERE kind = 'openvino' ORDER BY 1").fetchall()
        return rows, devices, history, described

    con = store.connect(tmp_path / "db.duckdb")
    store.migrate(con)
    for source, document in {"epyc-1": doc("cpu-aaaaaaaaaaaa", "e1", 10.0, "2026-11-20T00:00:00+00:00"),
                             "xeon-1": doc("cpu-bbbbbbbbbbbb", "x1", 6.0, "2026-11-21T00:00:00+00:00"),
                             "epyc-2": doc("cpu-aaaaaaaaaaaa", "e2", 10.0, "2026-11-22T00:00:00+00:00")}.items():
        store.replace_source(con, source, "ingest", document)
    epyc, xeon = f"{plain}-aaaaaaaaaaaa", f"{plain}-bbbbbbbbbbbb"
    loaded = state(con)
    assert loaded == ([("cpu-aaaaaaaaaaaa", epyc, epyc)] * 2 + [("cpu-bbbbbbbbbbbb", xeon, xeon)],
                      [(epyc, "cpu-aaaaaaaaaaaa"), (xeon, "cpu-bbbbbbbbbbbb")], [(epyc,), (xeon,)], [(epyc, "CPU"), (xeon, "CPU")])
    current = current_sets(con)
    verdicts = {c.current_run: (c.verdict, c.baseline_run) for c in compare(current, previous_sets(con, current), 0.1)}
    assert verdicts == {"e2": ("unchanged", "e1"), "x1": ("new", None)}  # never the Xeon's 6 ms as the EPYC's previous run

    # An earlier EPYC run whose partition was re-measured since: its rows are gone, its samples
    # stay in the history (with the run's CPU row, which names its host).
    cpu_row = {**_row(run_id="e0"), "hardware_fingerprint": "cpu-aaaaaaaaaaaa", "timestamp": "2026-11-19T00:00:00+00:00"}
    earlier = doc("cpu-aaaaaaaaaaaa", "e0", 10.0, "2026-11-19T00:00:00+00:00")
    store.replace_source(con, "epyc-0", "ingest", {**earlier, "results": [*earlier["results"], cpu_row]})
    store.replace_source(con, "epyc-0", "ingest", {**earlier, "results": []})
    history = con.execute("SELECT run_id, hardware_fingerprint FROM sample_history WHERE device_kind = 'openvino' ORDER BY 1").fetchall()
    assert history == [("e0", epyc), ("e1", epyc), ("e2", epyc), ("x1", xeon)]

    # The same rows as a store held them before: one id, one device; the migration separates them.
    con.execute("UPDATE measurements SET hardware_fingerprint = ?, device_id = ? WHERE device_kind = 'openvino'", [plain, plain])
    con.execute("UPDATE sample_history SET hardware_fingerprint = ? WHERE device_kind = 'openvino'", [plain])
    con.execute("DELETE FROM devices WHERE kind = 'openvino'")
    con.execute("DELETE FROM hardware WHERE kind = 'openvino'")
    con.execute("INSERT INTO hardware VALUES (?, 'openvino', 'CPU', 'vm', NULL, NULL, now())", [plain])
    con.execute("INSERT INTO devices SELECT ?, 'openvino', 'Xeon', NULL, 'cpu-bbbbbbbbbbbb', ?, NULL, '{\"said\": 1}', NULL, now(), now()",
                [plain, plain])
    con.execute("DELETE FROM schema_version WHERE version >= 21")
    assert store.migrate(con) == list(range(21, store.SCHEMA_VERSION + 1))
    assert state(con) == loaded
    assert con.execute("SELECT run_id, hardware_fingerprint FROM sample_history WHERE device_kind = 'openvino' ORDER BY 1").fetchall() == history
    # the old entry described the Xeon's device: the Xeon's new id keeps what it said, the EPYC's does not take it
    details = dict(con.execute("SELECT id, details FROM devices WHERE kind = 'openvino'").fetchall())
    assert json.loads(details[xeon]) == {"said": 1} and details[epyc] is None


def test_a_compatibility_rating_divides_this_machines_rows_by_its_own_probe(tmp_path):
    """A store holding two machines' rows: this machine's rating is its own rows over its own
    probe; the other machine's rows (measured at 90% of this probe) and a 1-thread profile's
    are not in its median."""
    from devicefit.compatibility import performance_ratings

    def row(host, mean_ms, run_id, profile=None):
        r = {**_row(run_id=run_id), "hardware_fingerprint": host, "forward_flops_per_sample": 10**9, "mean_ms": mean_ms,
             "device_profile": profile}
        return {**_doc([r]), "hardware": {"platforms": {"cpu": {"devices": [{"fingerprint": host}]}}}}

    con = store.connect(tmp_path / "db.duckdb")
    store.migrate(con)
    # 1 GFLOP a sample: 50 ms is 20 GFLOP/s, 20% of a 100 GFLOP/s probe; 11.1 ms is 90%.
    for source, document in {"here-1": row("cpu-here", 50.0, "h1"), "here-2": row("cpu-here", 50.0, "h2"),
                             "there": row("cpu-there", 100 / 9, "t1"), "there-2": row("cpu-there", 100 / 9, "t2"),
                             "there-3": row("cpu-there", 100 / 9, "t3"), "profiled": row("cpu-here", 100 / 9, "p1", "t1")}.items():
        store.replace_source(con, source, "ingest", document)
    inventory = {"platforms": {"cpu": {"devices": [{"fingerprint": "cpu-here"}]}}, "probes": {"cpu": {"matmul_gflops_best": 100.0}}}
    rating = performance_ratings(con, inventory)[("embedding", "cpu")]
    assert rating["performance_rating"] == "medium" and "reaches 20%" in rating["performance_basis"]
    assert "over 2 rows measured on this machine (cpu-here)" in rating["performance_basis"]


def test_a_served_prediction_is_scored_against_the_device_it_was_for(tmp_path):
    """A prediction answered for the H100 box is scored against the H100's later measurement,
    never the H200's (same kind, same host CPU fingerprint), and one for this host's CPU never
    against another host's CPU; the SQL device key is row_device's. A prediction recorded
    without a device (before the column) is still scored by kind."""
    from devicefit.predict.hardware_specs import row_device

    def gpu(p50, fingerprint, run_id):
        return {**_row(device="cuda:0", p50=p50, run_id=run_id, hostname="vm"), "device_name": fingerprint,
                "hardware_fingerprint": fingerprint, "timestamp": "2026-11-26T12:00:00+00:00"}

    def doc(rows, host):
        return {**_doc(rows), "hardware": {"platforms": {"cpu": {"devices": [{"fingerprint": host}]}}}}

    con = store.connect(tmp_path / "db.duckdb")
    store.migrate(con)
    store.replace_source(con, "h100", "ingest", doc([gpu(3.0, "cuda-h100", "r1")], "cpu-xeon"))
    store.replace_source(con, "h200", "ingest", doc([gpu(2.0, "cuda-h200", "r2")], "cpu-xeon"))
    cpu = {**_row(p50=30.0, run_id="r3", hostname="vm"), "timestamp": "2026-11-26T12:00:00+00:00"}
    store.replace_source(con, "amd", "ingest", doc([{**cpu, "hardware_fingerprint": "cpu-amd"}], "cpu-amd"))
    store.replace_source(con, "xeon", "ingest", doc([{**cpu, "run_id": "r4", "mean_ms": 60.0, "hardware_fingerprint": "cpu-xeon"}],
                                                    "cpu-xeon"))
    assert {row_device(r) for r in store.ok_measurements(con)} == {"cuda@cpu-xeon+cuda-h100", "cuda@cpu-xeon+cuda-h200",
                                                                   "cpu@cpu-amd", "cpu@cpu-xeon"}
    served = {"recorded_at": "2026-11-26T11:00:00", "predictor_version": "v", "origin": "api", "model": "bert-tiny",
              "backend": "torch", "precision": "fp32", "mode": "inference", "batch_size": 1, "seq_length": 128,
              "latency_ms": 3.0, "throughput": None, "memory_bytes": None, "source": "trained_predictor"}
    store.replace_served_predictions(con, "served-2026-11-26.jsonl", [
        {**served, "device_kind": "cuda", "device": "cuda@cpu-xeon+cuda-h100"},
        {**served, "device_kind": "cuda", "device": "cuda@cpu-xeon+cuda-h200", "latency_ms": 2.0},
        {**served, "device_kind": "cpu", "device": "cpu@cpu-xeon", "latency_ms": 60.0},
        {**served, "device_kind": "cpu", "device": "cpu@cpu-other"},  # a host that never measured: no score
    ])
    store.refresh_prediction_errors(con)
    scored = {r["device"]: r for r in store.query(con, "SELECT * FROM prediction_errors")}
    assert set(scored) == {"cuda@cpu-xeon+cuda-h100", "cuda@cpu-xeon+cuda-h200", "cpu@cpu-xeon"}
    assert all(r["measured_device"] == d and r["latency_ape"] == 0 for d, r in scored.items())
    # recorded before predictions kept their device: scored by kind, as then
    store.replace_served_predictions(con, "served-2026-11-25.jsonl", [{**served, "device_kind": "cuda", "device": None}])
    store.refresh_prediction_errors(con)
    [legacy] = store.query(con, "SELECT * FROM prediction_errors WHERE device IS NULL")
    assert legacy["measured_device"].startswith("cuda@cpu-xeon+cuda-h")


def test_an_empty_host_fingerprint_names_the_same_device_in_sql_and_in_python(tmp_path):
    """A landing file written by hand may carry an empty CPU fingerprint and an empty GPU
    fingerprint. Stored as they were, the SQL keys (coalesce keeps '') called the host '' while the
    predictors' row_device (which reads '' as absent) called it by its hostname, so a prediction
    served for that device was never scored and the aggregates named a host ''."""
    from devicefit.predict.hardware_specs import row_device

    def doc(rows):
        return {**_doc(rows), "hardware": {"platforms": {"cpu": {"devices": [{"fingerprint": ""}]}}}}

    con = store.connect(tmp_path / "db.duckdb")
    store.migrate(con)
    row = {**_row(p50=30.0, run_id="r1", hostname="lab-1"), "hardware_fingerprint": "",
           "timestamp": "2026-11-26T12:00:00+00:00"}
    store.replace_source(con, "lab", "ingest", doc([row]))
    store.refresh_aggregates(con)
    [stored] = store.ok_measurements(con)
    assert stored["host_fingerprint"] is None and stored["hardware_fingerprint"] is None
    assert row_device(stored) == "cpu@lab-1"
    [agg] = store.query(con, "SELECT host FROM aggregated_results")
    assert agg["host"] == "lab-1"
    store.replace_served_predictions(con, "served-2026-11-26.jsonl", [{
        "recorded_at": "2026-11-26T11:00:00", "predictor_version": "v", "origin": "api", "model": "bert-tiny",
        "backend": "torch", "precision": "fp32", "mode": "inference", "batch_size": 1, "seq_length": 128,
        "latency_ms": 30.0, "throughput": None, "memory_bytes": None, "source": "trained_predictor",
        "device_kind": "cpu", "device": row_device(stored)}])
    store.refresh_prediction_errors(con)
    [scored] = store.query(con, "SELECT * FROM prediction_errors")
    assert scored["measured_device"] == "cpu@lab-1" and scored["latency_ape"] == 0


def test_a_bare_kind_answers_for_this_machines_own_gpu():
    """On the H100 box, `predict --hardware cuda` answers for the H100, although the H200 box
    (same host CPU fingerprint) measured more rows; elsewhere, the best-measured GPU. The fleet's
    representative of a kind and the per-machine error gate tell the two boxes apart alike."""
    from devicefit.fleet.inventory import fleet_inventory
    from devicefit.fleet.partitions import hardware_of_inventory
    from devicefit.predict.hardware_specs import default_devices, machine_of

    h100, h200 = "cuda@cpu-xeon+cuda-h100", "cuda@cpu-xeon+cuda-h200"
    rows = [h100] * 2 + [h200] * 5 + ["cpu@cpu-xeon"]
    here = {"platforms": {"cpu": {"devices": [{"fingerprint": "cpu-xeon"}]}, "cuda": {"devices": [{"fingerprint": "cuda-h100"}]}}}
    assert hardware_of_inventory(here) == {"cpu-xeon", "cuda-h100"}
    assert default_devices(rows, "cpu-xeon", hardware_of_inventory(here)) == {"cuda": h100, "cpu": "cpu@cpu-xeon"}
    assert default_devices(rows, "cpu-other")["cuda"] == h200
    assert machine_of(h100) != machine_of(h200) and machine_of("cpu@cpu-xeon+t1") == "cpu-xeon"
    registered = [{"id": fp, "kind": "cuda", "name": name, "host_fingerprint": "cpu-xeon", "hardware_fingerprint": fp}
                  for fp, name in (("cuda-h100", "H100"), ("cuda-h200", "H200"))]
    for mine in ("cuda-h100", "cuda-h200"):
        fleet = fleet_inventory(registered, "cpu-xeon", frozenset({mine}))
        assert fleet["platforms"]["cuda"]["devices"][0]["fingerprint"] == mine


def test_an_aggregates_table_from_before_the_accelerator_column_is_still_read(tmp_path):
    """A data directory whose aggregates were written by an older devicefit: read as they are
    (every row's accelerator None) until the pipeline rewrites them, not an error."""
    con = store.connect(tmp_path / "db.duckdb")
    store.migrate(con)
    store.replace_source(con, "a", "partition", _doc([_row(p50=10.0)]))
    store.refresh_aggregates(con)
    con.execute("ALTER TABLE aggregated_results DROP COLUMN accelerator")
    [row] = store.aggregates(con)
    assert row["accelerator"] is None and row["p50_ms"] == 10.0


def test_skip_and_failure_reasons_are_stored_as_codes_and_legacy_rows_get_theirs(tmp_path):
    """The compatibility matrix filters on the code, never on the wording; rows written before the
    code existed (older landing files) get it from the wording once, when they are loaded."""
    path = tmp_path / "db.duckdb"
    store.init_db(path)
    cfg = BenchmarkConfig("bert-tiny", device="cuda")
    coded = BenchmarkResult.for_config(cfg, "r1", "2026-11-22T00:00:00+00:00", "skipped", "the wording changed", "device_unavailable",
                                       family="embedding").to_json()
    legacy = [BenchmarkResult.for_config(BenchmarkConfig("bert-tiny", device=d, batch_size=b), "r2", "2026-11-22T00:00:00+00:00",
                                         status, error, family="embedding").to_json()
              for d, b, status, error in [("mps", 1, "skipped", "mps is not available here: not a Mac"),
                                          ("cpu", 2, "skipped", "dynamic int8 quantizes linear layers only"),
                                          ("cpu", 3, "failed", "timed out after 8 s (load and measurement); worker killed"),
                                          ("cpu", 4, "failed", "RuntimeError: boom (at x.py:1)")]]
    for row in legacy:
        row.pop("reason_code")  # as an older version wrote it
    con = store.connect(path)
    store.replace_source(con, "partition:coded", "partition", _doc([coded]))
    store.replace_source(con, "ingest:legacy", "ingest", _doc(legacy))
    codes = dict(con.execute("SELECT device || ':' || batch_size, reason_code FROM measurements").fetchall())
    assert codes == {"cuda:1": "device_unavailable", "mps:1": "device_unavailable", "cpu:2": "unsupported", "cpu:3": "timeout",
                     "cpu:4": "exception"}
    counted = {(r["device_kind"], r["status"]) for r in store.status_by_family_and_kind(con)}
    assert counted == {("cpu", "skipped"), ("cpu", "failed")}  # absent hardware is no evidence either way
    con.close()


def test_an_unknown_reason_code_is_refused_with_the_field_named(tmp_path):
    from devicefit.landing_schema import LandingFileError

    path = tmp_path / "db.duckdb"
    store.init_db(path)
    row = BenchmarkResult.for_config(BenchmarkConfig("bert-tiny"), "r1", "2026-11-22T00:00:00+00:00", "skipped", "why", "because").to_json()
    con = store.connect(path)
    with pytest.raises(LandingFileError, match="reason_code"):
        store.replace_source(con, "ingest:bad", "ingest", _doc([row]))
    con.close()
