"""The quick profile's call budget (benchmark_runners.call_budget): a config whose one call is
predicted over it, from its smaller batches measured earlier in the same worker, is skipped with
what was predicted from what; nothing else is."""
import math
from dataclasses import replace

import pytest

from benchmark_runners.call_budget import REASON_CODE, over_call_budget, predicted_call_ms
from benchmark_runners.harness import TimingPolicy
from benchmark_runners.records import BenchmarkConfig, BenchmarkResult

BUDGETED = TimingPolicy(max_time_s=1.5, cap_overrun=1.5, call_budget_s=2.25)


def _row(config: BenchmarkConfig, batch: int, p50_ms: float, status: str = "ok", **extra) -> BenchmarkResult:
    return BenchmarkResult.for_config(replace(config, batch_size=batch), "r", "2026-11-30T00:00:00+00:00", status,
                                      None if status == "ok" else "boom", None if status == "ok" else "exception", p50_ms=p50_ms,
                                      **extra)


def test_two_smaller_batches_predict_by_the_exponent_they_measured_and_one_is_no_evidence():
    c = BenchmarkConfig("whisper-tiny", batch_size=16, policy=BUDGETED)
    assert predicted_call_ms(c, [_row(c, 4, 9000.0)]) is None  # its own batch scaling unmeasured: measured
    # b1 -> b4 grew 1.8x: exponent log(1.8)/log(4) = 0.42, clamped to 0.5 (never assumed flatter)
    ms, basis = predicted_call_ms(c, [_row(c, 1, 1000.0), _row(c, 4, 1800.0)])
    assert ms == pytest.approx(1800.0 * 4 ** 0.5) and "0.42 clamped" in basis and "batch 4's 1.80 s a call" in basis
    # b1 -> b4 grew 3.5x: exponent 0.90, used as measured
    ms, _ = predicted_call_ms(c, [_row(c, 1, 500.0), _row(c, 4, 1750.0)])
    assert ms == pytest.approx(1750.0 * 4 ** (math.log(3.5) / math.log(4)))
    # super-linear growth is capped at linear
    ms, _ = predicted_call_ms(c, [_row(c, 1, 100.0), _row(c, 4, 1000.0)])
    assert ms == pytest.approx(4000.0)


def test_a_call_is_the_p50_times_the_requests_in_flight():
    """OpenVINO's throughput mode records one batch's share of a call that ran N requests: the
    harness's cap sees the whole call, and so does the budget."""
    c = BenchmarkConfig("clip-vit-base-patch32", device="openvino:CPU", backend="openvino", batch_size=16, policy=BUDGETED)
    rows = [_row(c, 1, 120.0, backend_config={"infer_requests": 1}), _row(c, 4, 400.0, backend_config={"infer_requests": 2})]
    ms, basis = predicted_call_ms(c, rows)
    assert ms == pytest.approx(800.0 * 4 ** 1.0) and "batch 4's 0.80 s a call" in basis  # 120 -> 800 ms: clamped to linear
    assert over_call_budget(c, rows) is not None


def test_only_uncontended_rows_of_the_same_config_at_a_smaller_batch_inform_it():
    c = BenchmarkConfig("gpt2", batch_size=16, seq_length=512, policy=BUDGETED)
    others = [_row(replace(c, seq_length=128), 1, 5000.0), _row(replace(c, precision="int8"), 1, 5000.0),
              _row(replace(c, mode="training"), 1, 5000.0), _row(c, 16, 5000.0), _row(c, 32, 5000.0),
              _row(replace(c, model="bert-tiny"), 1, 5000.0), _row(c, 1, 5000.0, status="failed")]
    assert predicted_call_ms(c, others + [_row(c, 4, 9000.0)]) is None  # one smaller batch of its own
    assert over_call_budget(c, others + [_row(c, 4, 9000.0)]) is None
    assert predicted_call_ms(c, [_row(c, 1, 3000.0, contended=True), _row(c, 4, 9000.0)]) is None


def test_a_config_predicted_over_the_budget_is_refused_with_the_figures_and_one_within_it_is_not():
    c = BenchmarkConfig("vit-base-patch16-224", batch_size=16, policy=BUDGETED)
    rows = [_row(c, 1, 330.0), _row(c, 4, 1130.0)]
    reason = over_call_budget(c, rows)
    assert reason is not None
    assert "predicted to take 3.87 s" in reason and "batch 4's 1.13 s a call" in reason and "2.25 s call budget" in reason
    assert "devicefit run --batch-sizes 16" in reason
    assert over_call_budget(c, [_row(c, 1, 150.0), _row(c, 4, 500.0)]) is None  # 1.65 s: within it
    assert over_call_budget(replace(c, policy=replace(BUDGETED, call_budget_s=None)), rows) is None


def test_a_budget_must_be_a_positive_number_of_seconds():
    for bad in (0.0, -1.0, float("nan")):
        with pytest.raises(ValueError, match="call_budget_s"):
            TimingPolicy(call_budget_s=bad)


def test_the_quick_profile_has_a_budget_and_named_batch_sizes_and_generation_do_not():
    """make run's quick profile leaves single-sample configs to the predictors; batch sizes a user
    named (`--batch-sizes`, `devicefit benchmark --timing quick`) are each measured, and generation
    requests keep their own policy."""
    from devicefit.profiles import FULL, QUICK, Selection, partition_configs, timing_policy

    assert QUICK.policy.call_budget_s == pytest.approx(QUICK.policy.max_time_s * QUICK.policy.cap_overrun)
    assert FULL.policy.call_budget_s is None
    configs = partition_configs("gpt2", "cpu", Selection(), cpu_isa=[])
    assert {c.policy.call_budget_s for c in configs if c.mode != "generation"} == {QUICK.policy.call_budget_s}
    assert {c.policy.call_budget_s for c in configs if c.mode == "generation"} == {None}
    named = partition_configs("gpt2", "cpu", Selection(batch_sizes=(1, 16)), cpu_isa=[])
    assert {c.policy.call_budget_s for c in named} == {None}
    assert timing_policy("quick", "inference").call_budget_s is None


def test_the_worker_skips_a_config_over_its_budget_after_measuring_two_smaller_batches(tiny_models):
    """A real worker-side measurer: batches 1 and 2 of a tiny BERT are measured, and batch 4 under
    a budget far below any call is skipped with the code and the prediction; without a budget it
    is measured. A measurer started again (after a crash) that is given those rows skips it too."""
    from benchmark_runners.measure import ConfigMeasurer
    from tests.conftest import FAST_POLICY

    tight = replace(FAST_POLICY, call_budget_s=1e-6)
    model = str(tiny_models["text"])
    measurer = ConfigMeasurer("test-run", {"suite": "pytest"}, {"cpu": {"name": "test cpu", "fingerprint": "cpu-test"}})

    def uncontended(config: BenchmarkConfig, attempts: int = 3) -> BenchmarkResult:
        """A row timed while another process used the CPU is no evidence for the budget: on a busy
        machine the smaller batches are measured again, and the test skips, saying so, if they
        never come out clean (a fresh clone's suite once had batch 4 measured for that reason)."""
        for _ in range(attempts):
            row = measurer.run(config)
            if row.status != "ok" or not row.contended:
                return row
        pytest.skip(f"batch {config.batch_size} was timed while other processes used {row.other_cpu_share:.0%} of the CPU, "
                    f"{attempts} times: the budget has no uncontended evidence to predict from")

    try:
        smaller = [uncontended(BenchmarkConfig(model=model, batch_size=b, policy=tight)) for b in (1, 2)]
        assert [r.status for r in smaller] == ["ok", "ok"], [r.error for r in smaller]
        skipped = measurer.run(BenchmarkConfig(model=model, batch_size=4, policy=tight))
        assert (skipped.status, skipped.reason_code) == ("skipped", REASON_CODE), (skipped.contended, skipped.error)
        assert "one call is predicted to take" in skipped.error and "batch 2's" in skipped.error
        assert skipped.family is not None and skipped.samples_ms in (None, [])
        measured = measurer.run(BenchmarkConfig(model=model, batch_size=4, policy=FAST_POLICY))
        assert measured.status == "ok", measured.error
    finally:
        measurer.shutdown()
    restarted = ConfigMeasurer("test-run", {"suite": "pytest"}, {"cpu": {"name": "test cpu", "fingerprint": "cpu-test"}})
    try:
        restarted.remember(smaller)
        again = restarted.run(BenchmarkConfig(model=model, batch_size=4, policy=tight))
        assert (again.status, again.reason_code) == ("skipped", REASON_CODE)
    finally:
        restarted.shutdown()


def test_a_restarted_worker_is_sent_its_groups_earlier_rows():
    """benchmark_runners.sweep: the job of a worker started after its group's earlier one died
    carries the rows that one produced (the worker gives them to its measurer)."""
    import io
    import json
    from types import SimpleNamespace

    from benchmark_runners.sweep import _Worker

    c = BenchmarkConfig("bert-tiny", batch_size=16, policy=BUDGETED)
    stdin = io.BytesIO()
    stdin.close = lambda: None  # keep what was written readable
    fake = SimpleNamespace(job={"run_id": "r"}, proc=SimpleNamespace(stdin=stdin), configs=[])
    earlier = [_row(c, 1, 100.0), _row(c, 4, 300.0)]
    _Worker.send(fake, [c], earlier)
    job = json.loads(stdin.getvalue())
    assert [BenchmarkResult.from_json(r).batch_size for r in job["earlier"]] == [1, 4]
    assert over_call_budget(c, [BenchmarkResult.from_json(r) for r in job["earlier"]]) is None  # 300 ms x 4 within 2.25 s


def test_a_skip_for_the_budget_says_nothing_about_compatibility(tmp_path):
    from devicefit import store
    from devicefit.results_io import results_document

    path = tmp_path / "db.duckdb"
    store.init_db(path)
    c = BenchmarkConfig("bert-tiny")
    rows = [BenchmarkResult.for_config(c, "r1", "2026-11-30T00:00:00+00:00", "failed", "RuntimeError: boom", "exception",
                                       family="embedding").to_json(),
            BenchmarkResult.for_config(replace(c, batch_size=16), "r1", "2026-11-30T00:00:00+00:00", "skipped",
                                       "not measured: one call is predicted ...", REASON_CODE, family="embedding").to_json()]
    con = store.connect(path)
    try:
        store.replace_source(con, "partition:x", "partition", {**results_document("r1", [], {}), "results": rows})
        assert con.execute("SELECT reason_code FROM measurements WHERE status = 'skipped'").fetchall() == [(REASON_CODE,)]
        counted = {(r["device_kind"], r["status"]) for r in store.status_by_family_and_kind(con)}
        assert counted == {("cpu", "failed")}  # the failure is evidence; the budget's skip is not
    finally:
        con.close()
