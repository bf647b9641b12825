"""Traces, parameter and FLOP counts are taken once per model, input, code and library versions,
on disk, and read back by any later process; a broken entry is taken again, never believed."""
import json
import os
import subprocess
import sys
import time

import pytest

from models import analysis, derived_cache, op_profile
from models.inputs import input_signature
from models.resolve import resolve_model


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("DEVICEFIT_CACHE_DIR", str(tmp_path / "cache"))
    _forget_in_process(monkeypatch)
    monkeypatch.setattr(analysis, "_breakdowns", {})
    monkeypatch.setattr(analysis, "_flops", {})
    return tmp_path / "cache"


def _counting_traces(monkeypatch) -> list[int]:
    calls: list[int] = []
    real = op_profile._run_trace
    monkeypatch.setattr(op_profile, "_run_trace", lambda spec, sig, *a: calls.append(sig.batch_size) or real(spec, sig, *a))
    return calls


def _forget_in_process(monkeypatch):
    for memo in (op_profile._profiles, op_profile._per_sample_peaks, op_profile._training_peaks):
        monkeypatch.setattr(memo, "_values", type(memo._values)())


def test_a_trace_is_read_back_with_the_same_figures_instead_of_taken_again(cache, monkeypatch):
    spec = resolve_model("bert-tiny")
    calls = _counting_traces(monkeypatch)
    first = op_profile.op_profile(spec)
    figures = (first.flops.tolist(), first.category.tolist(), first.peak_activations(4))
    assert calls == [1, 2] and len(list((cache / "trace").glob("*.json"))) == 2
    _forget_in_process(monkeypatch)  # as a new process starts
    again = op_profile.op_profile(spec)
    assert (again.flops.tolist(), again.category.tolist(), again.peak_activations(4)) == figures
    assert calls == [1, 2]
    # another sequence length, or another config of the same name, is another trace
    op_profile.op_profile(spec, 64)
    smaller = type(spec)(**{**spec.__dict__, "config": {**spec.config, "num_hidden_layers": 1}})
    assert op_profile.op_profile(smaller).flops.sum() < first.flops.sum()
    assert calls == [1, 2, 1, 1]


ROW = [0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.0, 0.0]  # TRACE_FIGURES of them


@pytest.mark.parametrize("damage", [
    "{not json", "[" * 100_000, json.dumps([1, 2]), json.dumps({"rows": [ROW]}),
    json.dumps({"rows": [[0, 1.0]], "peak": 1.0}),  # a row of the wrong length
    json.dumps({"rows": [ROW[:7]], "peak": 1.0}),  # a row written before the fused figure
    json.dumps({"rows": [[True, *ROW[1:]]], "peak": 1.0}),  # a bool for a category
    json.dumps({"rows": [[300, *ROW[1:]]], "peak": 1.0}), json.dumps({"rows": [[2.5, *ROW[1:]]], "peak": 1.0}),
    json.dumps({"rows": [], "peak": 1.0}), json.dumps({"rows": [ROW], "peak": "big"}),
    json.dumps({"rows": [ROW], "peak": -1.0}), '{"rows": [[0, NaN, 1, 1, 1, 1, 0, 0]], "peak": 1.0}',
    '{"rows": [[0, 1, 1, 1, 1, 1, 0, 0]], "peak": Infinity}', '{"rows": [[0, 1, 1, 1, 1, 1, 0, 0]], "peak": 1' + "0" * 400 + "}",
    '{"rows": [[0, 1' + "0" * 400 + ', 1, 1, 1, 1, 0, 0]], "peak": 1.0}'])
def test_a_damaged_trace_entry_is_taken_again(cache, monkeypatch, damage):
    spec = resolve_model("bert-tiny")
    calls = _counting_traces(monkeypatch)
    first = op_profile.op_profile(spec).flops.tolist()
    (entry,) = (cache / "trace").glob("*.json")
    entry.write_text(damage)
    _forget_in_process(monkeypatch)
    assert op_profile.op_profile(spec).flops.tolist() == first and calls == [1, 1]
    assert json.loads(entry.read_text())["rows"]  # written over with the real trace


def test_counts_are_read_back_without_building_the_model(cache, monkeypatch):
    spec = resolve_model("gpt2")
    breakdown = analysis.parameter_breakdown(spec)
    flops = analysis.flop_count_per_sample(spec)
    assert breakdown.total == 124_439_808
    monkeypatch.setattr(analysis, "_breakdowns", {})
    monkeypatch.setattr(analysis, "_flops", {})
    monkeypatch.setattr(analysis, "meta_model", lambda spec: pytest.fail(f"{spec.name} built again"))
    assert analysis.parameter_breakdown(spec) == breakdown and analysis.flop_count_per_sample(spec) == flops
    (entry,) = (cache / "parameters").glob("*.json")
    entry.write_text(json.dumps({**json.loads(entry.read_text()), "total": 1.5}))  # not what a count writes
    monkeypatch.setattr(analysis, "_breakdowns", {})
    with pytest.raises(pytest.fail.Exception, match="built again"):
        analysis.parameter_breakdown(spec)


@pytest.mark.parametrize("damage", [{"total": [1, 2]}, {"large_tensors": 3}, {"large_tensors": [1.5]},
                                    {"large_tensors": [-1]}, {"large_tensors": ["x"]}])
def test_a_damaged_list_in_the_parameter_counts_is_counted_again(cache, monkeypatch, damage):
    """A list is read back only where the counts hold one (the large tensors' sizes), and only of
    non-negative integers; anything else is counted again from the model, never believed."""
    spec = resolve_model("bert-tiny")
    breakdown = analysis.parameter_breakdown(spec)
    assert breakdown.large_tensors == (30522 * 128,)
    (entry,) = (cache / "parameters").glob("*.json")
    entry.write_text(json.dumps({**json.loads(entry.read_text()), **damage}))
    monkeypatch.setattr(analysis, "_breakdowns", {})
    built: list[str] = []
    real = analysis.meta_model
    monkeypatch.setattr(analysis, "meta_model", lambda spec: built.append(spec.name) or real(spec))
    assert analysis.parameter_breakdown(spec) == breakdown and built == ["bert-tiny"]


def test_a_trace_is_its_own_entry_per_inputs_mode_and_code(cache, monkeypatch):
    spec = resolve_model("bert-tiny")
    calls = _counting_traces(monkeypatch)
    one, two = input_signature(spec, 1), input_signature(spec, 2)
    inference = op_profile._trace(spec, one)
    training = op_profile._trace(spec, one, training=True)  # autograd keeps saved tensors: a higher peak
    op_profile._trace(spec, two)
    assert training.peak > inference.peak and calls == [1, 1, 2]
    assert op_profile._trace(spec, one, training=True) == training and calls == [1, 1, 2]
    monkeypatch.setattr(derived_cache, "code_identity", lambda: "other models/ source|torch 0|transformers 0")
    op_profile._trace(spec, one)  # another version of the code traces again
    assert calls == [1, 1, 2, 1] and len(list((cache / "trace").glob("*.json"))) == 4


def test_the_least_recently_used_entries_go_beyond_the_bound(cache, monkeypatch):
    monkeypatch.setattr(derived_cache, "MAX_ENTRIES", 3)
    for i in range(5):
        assert derived_cache.disk_cached("test", i, lambda i=i: i, encode=int, decode=derived_cache.integer) == i
        os.utime(derived_cache.entry_path("test", i), (1000 + i, 1000 + i))  # an mtime per write, whatever the clock's grain
        if i == 3:
            derived_cache.disk_cached("test", 1, lambda: pytest.fail("kept entry computed"), encode=int, decode=derived_cache.integer)
            os.utime(derived_cache.entry_path("test", 1), (2000, 2000))  # 1 was read last
    kept = {i for i in range(5) if derived_cache.entry_path("test", i).exists()}
    assert kept == {1, 3, 4}


def test_a_write_removes_temporary_files_a_dead_writer_left(cache):
    """A helper killed mid-write (parallel_warm's stop) leaves its temporary file; the next
    write in that kind removes it once it is older than any live write, and no younger one."""
    derived_cache.disk_cached("test", 0, lambda: 0, encode=int, decode=derived_cache.integer)
    directory = derived_cache.entry_path("test", 0).parent
    stale, live = directory / ".left-by-a-killed-helper.tmp", directory / ".being-written.tmp"
    stale.write_text("{")
    live.write_text("{")
    old = time.time() - derived_cache.STALE_TEMPORARY_S - 60
    os.utime(stale, (old, old))
    derived_cache.disk_cached("test", 1, lambda: 1, encode=int, decode=derived_cache.integer)
    assert not stale.exists() and live.exists()
    assert derived_cache.disk_cached("test", 0, lambda: pytest.fail("entry lost"), encode=int, decode=derived_cache.integer) == 0


def test_no_home_directory_still_answers(monkeypatch):
    def no_home():
        raise RuntimeError("Could not determine home directory.")

    monkeypatch.setattr(derived_cache, "cache_home", no_home)
    assert derived_cache.disk_cached("test", 1, lambda: 7, encode=int, decode=derived_cache.integer) == 7


def test_an_unwritable_cache_still_answers(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("DEVICEFIT_CACHE_DIR", str(blocker))  # a file where the directory should be
    _forget_in_process(monkeypatch)
    assert op_profile.op_profile(resolve_model("bert-tiny")).flops.sum() > 0


def test_another_process_reads_the_trace_this_one_took(cache):
    spec = resolve_model("bert-tiny")
    flops = float(op_profile.op_profile(spec).flops.sum())
    code = ("import sys; from models import op_profile; from models.resolve import resolve_model\n"
            "op_profile._run_trace = lambda *a: sys.exit('traced again')\n"
            "print(float(op_profile.op_profile(resolve_model('bert-tiny')).flops.sum()))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "DEVICEFIT_CACHE_DIR": str(cache)})
    assert out.returncode == 0, out.stderr[-2000:]
    assert float(out.stdout.split()[-1]) == flops


def test_a_cache_it_may_not_touch_is_still_read(cache, monkeypatch):
    """A cache shared read-only: refreshing an entry's time fails, and the entry is still used."""
    assert derived_cache.disk_cached("test", "x", lambda: 5, encode=int, decode=derived_cache.integer) == 5

    def read_only(*_args):
        raise PermissionError("read-only file system")

    monkeypatch.setattr(derived_cache.os, "utime", read_only)
    assert derived_cache.disk_cached("test", "x", lambda: pytest.fail("computed again"), encode=int, decode=derived_cache.integer) == 5
