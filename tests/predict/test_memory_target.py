"""Memory is learned and answered as what must fit on the device: the process's RSS where the
model lives in the host's RAM, the GPU allocator's reserved peak on a card with its own memory
(the H200 rows: host RSS 1.9 GB against 62 MB on the card for mobilenet-v2 at batch 1)."""
import json
from pathlib import Path

from devicefit.predict.memory_model import device_memory_kind, memory_target

H200 = Path(__file__).resolve().parents[2] / "benchmarks" / "datasets" / "h200-cuda" / "cuda_inference_cnn.json"


def test_a_gpu_row_is_learned_by_its_card_memory_and_a_cpu_row_by_its_rss():
    assert device_memory_kind("cuda") and device_memory_kind("rocm")
    assert not any(device_memory_kind(k) for k in ("cpu", "openvino", "mps", "wasm", "webgpu", "unknown-kind"))
    raw = json.loads(H200.read_text())["results"][0]
    row = {**raw, "device_kind": raw["device"].split(":")[0]}  # as the store derives it
    assert row["device_kind"] == "cuda" and row["device_reserved_peak_bytes"] < row["peak_rss_bytes"] / 10
    assert memory_target(row) == row["device_reserved_peak_bytes"]
    assert memory_target({**row, "device_kind": "cpu"}) == row["peak_rss_bytes"]
    # a GPU row without the allocator's figure (an ingested file that lacks it) falls back to RSS
    assert memory_target({**row, "device_reserved_peak_bytes": None}) == row["peak_rss_bytes"]
    assert memory_target({"device_kind": "cpu"}) is None


def test_served_gpu_predictions_are_scored_against_the_card_memory():
    """prediction_errors compares a served memory prediction with what it predicts: on a CUDA row
    the allocator's reserved peak, not the process's RSS."""
    import duckdb

    from devicefit.predict.hardware_specs import row_device
    from devicefit.store.queries import prediction_errors_sql

    con = duckdb.connect()
    con.execute("CREATE TABLE measurements (status VARCHAR, model VARCHAR, device_kind VARCHAR, backend VARCHAR, device_profile VARCHAR, "
                "precision VARCHAR, mode VARCHAR, batch_size INTEGER, seq_length INTEGER, timestamp TIMESTAMP, run_id VARCHAR, "
                "mean_ms DOUBLE, throughput_samples_per_s DOUBLE, peak_rss_bytes BIGINT, device_reserved_peak_bytes BIGINT, "
                "host_fingerprint VARCHAR, hostname VARCHAR, hardware_fingerprint VARCHAR, backend_config JSON)")
    con.execute("CREATE TABLE predictions (source_file VARCHAR, recorded_at TIMESTAMP, source VARCHAR, model VARCHAR, device_kind VARCHAR, "
                "backend VARCHAR, precision VARCHAR, mode VARCHAR, batch_size INTEGER, seq_length INTEGER, latency_ms DOUBLE, "
                "throughput DOUBLE, memory_bytes DOUBLE, device VARCHAR, origin VARCHAR, predictor_version VARCHAR)")
    for kind in ("cuda", "rocm", "cpu", "mps"):
        con.execute("INSERT INTO measurements VALUES ('ok', 'm', ?, 'torch', NULL, 'fp32', 'inference', 1, NULL, '2026-01-02', 'r', "
                    "10, 100, 2000000000, 60000000, 'cpu-1', 'h', ?, NULL)", [kind, f"{kind}-1"])
        con.execute("INSERT INTO predictions VALUES ('f', '2026-01-01', 'trained_predictor', 'm', ?, 'torch', 'fp32', 'inference', 1, "
                    "NULL, 10, 100, 60000000, ?, 'api', 'v')",
                    [kind, row_device({"device_kind": kind, "host_fingerprint": "cpu-1", "hardware_fingerprint": f"{kind}-1"})])
    con.execute(prediction_errors_sql())
    ape = dict(con.execute("SELECT device_kind, memory_ape FROM prediction_errors").fetchall())
    # the kinds with memory of their own are the registry's, as memory_target decides: Apple's
    # unified memory is the host's
    assert ape["cuda"] == ape["rocm"] == 0 and ape["cpu"] > 0.9 and ape["mps"] > 0.9
