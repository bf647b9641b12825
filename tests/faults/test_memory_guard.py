"""Issue 21 deliver 4: no configuration can invite the OOM killer. Before a worker allocates,
the sweep compares the config's memory floor with the device's free memory and refuses with a
`skipped` row naming both; absurd batch sizes are refused where they are typed."""
import pytest
from typer.testing import CliRunner

from benchmark_runners import memory_guard
from benchmark_runners.hardware import detect_hardware
from benchmark_runners.records import MAX_BATCH_SIZE, BenchmarkConfig
from benchmark_runners.sweep import run_sweep
from devicefit import store
from devicefit.cli import app
from models.memory_floor import memory_floor
from models.resolve import resolve_model


@pytest.fixture(scope="module")
def inventory():
    return detect_hardware(probe=False)


class _Free:
    def __init__(self, available: int):
        self.available = available


def test_a_batch_that_cannot_fit_is_refused_with_both_figures(inventory, monkeypatch):
    monkeypatch.setattr(memory_guard.psutil, "virtual_memory", lambda: _Free(16 * 2**30))  # a 16 GiB host, whatever this one has
    reason = memory_guard.memory_refusal(BenchmarkConfig(model="bert-tiny", device="cpu", batch_size=100_000), inventory)
    assert reason and "needs at least" in reason and "16.0 GiB available on this host" in reason and "peak activations" in reason
    assert memory_guard.memory_refusal(BenchmarkConfig(model="bert-tiny", device="cpu", batch_size=1), inventory) is None


def test_the_sweep_skips_before_starting_a_worker(inventory, monkeypatch, fast_policy):
    """With (pretend) 1 MiB free, even bert-tiny at batch 1 cannot fit: no worker is given it (the
    one started to import meanwhile is killed before any config reaches it)."""
    monkeypatch.setattr(memory_guard.psutil, "virtual_memory", lambda: _Free(2**20))
    events = []
    config = BenchmarkConfig(model="bert-tiny", device="cpu", batch_size=1, policy=fast_policy)
    [row] = run_sweep([config], on_event=events.append, inventory=inventory)
    assert row.status == "skipped" and "needs at least" in row.error and "0.0 GiB available on this host" in row.error
    assert not [e for e in events if e.kind == "worker_started"]


def test_the_floor_is_below_every_measured_peak(measured):
    """A floor that overshot would refuse configs that run: it stays under each measured peak RSS."""
    con = store.connect(measured.database, read_only=True)
    try:
        rows = store.query(con, "SELECT model, batch_size, precision, mode, seq_length, peak_rss_bytes FROM measurements "
                                "WHERE status = 'ok' AND peak_rss_bytes IS NOT NULL AND backend = 'torch'")
    finally:
        con.close()
    assert rows
    for r in rows:
        floor = memory_floor(resolve_model(r["model"]), r["batch_size"], r["precision"], r["mode"], r["seq_length"])
        assert 0 < floor.total_bytes < r["peak_rss_bytes"], r


def test_absurd_batch_sizes_are_refused_where_typed():
    with pytest.raises(ValueError, match="over 2,147,483,647"):
        BenchmarkConfig(model="bert-tiny", batch_size=MAX_BATCH_SIZE + 1)
    out = CliRunner().invoke(app, ["benchmark", "--model", "bert-tiny", "--batch-sizes", "99999999999999999999"])
    assert out.exit_code == 2 and "batch size must be an integer from 1 to 2,147,483,647" in out.output
    assert "Traceback" not in out.output and len(out.output.strip().splitlines()) <= 2
