"""Hardware selection on the session's trained predictor: constraints exclude with reasons,
scores are relative, and the configuration is validated."""
import json

import pytest

from devicefit.select.selector import HardwareSelector, SelectionError
from models.resolve import resolve_model


@pytest.fixture(scope="module")
def selector(measured, artifact):
    return HardwareSelector(benchmark_dir=measured.root, record=False)


def test_response_has_the_spec_shape_and_relative_scores(selector):
    r = selector.select_hardware("embedding", "bert-base-uncased", 16, 128, available_hardware=["cpu", "cuda"])
    assert {"model_family", "model_name", "model_size", "model_size_category", "batch_size", "sequence_length", "precision",
            "mode", "primary_recommendation", "fallback_options", "compatible_hardware", "explanation",
            "prediction_source", "all_scores"} <= set(r)
    assert r["model_size"] == 109_482_240 and r["model_size_category"] == "medium"
    assert {r["primary_recommendation"], *r["fallback_options"]} == {"cpu", "cuda"}
    latency = {k: s["relative_scores"]["latency"] for k, s in r["all_scores"].items()}
    assert max(latency.values()) == pytest.approx(1.0) and min(latency.values()) < 1.0  # relative to the best
    assert "ms predicted" in r["explanation"] and r["primary_recommendation"] in r["explanation"]
    assert r["all_scores"]["cpu"]["predictions"]["source"] == "trained_predictor"


def test_incompatible_hardware_is_excluded_with_the_reason(selector):
    r = selector.select_hardware(None, "bert-tiny", 2, available_hardware=["cpu", "webnn"])
    assert r["primary_recommendation"] == "cpu" and "webnn" not in r["compatible_hardware"]
    assert r["all_scores"]["webnn"]["excluded"].startswith("incompatible") and "webnn excluded (incompatible" in r["explanation"]
    assert r["all_scores"]["webnn"]["exclusion"]["kind"] == "incompatible" and "webnn" not in r["compatible_hardware"]


def test_measured_failures_make_a_family_incompatible(selector, monkeypatch):
    matrix = {"model_families": {"embedding": {"hardware_compatibility": {
        "cpu": {"compatible": False, "source": "measured", "reasons": ["out of memory"]}}}}}
    monkeypatch.setattr(selector, "compatibility", matrix)
    r = selector.select_hardware(None, "bert-tiny", 2, available_hardware=["cpu", "cuda"])
    assert r["primary_recommendation"] == "cuda"
    assert "every embedding measurement on cpu failed: out of memory" in r["all_scores"]["cpu"]["excluded"]


def _best_feasible(r) -> str:
    """The candidate a selection must pick: the highest score among those not excluded. Which
    kind that is depends on this CPU's measurements (torch or OpenVINO), so tests compare with
    it instead of naming a winner."""
    feasible = {k: s["score"] for k, s in r["all_scores"].items() if not s.get("excluded")}
    return max(feasible, key=feasible.get)


def test_unavailable_hardware_is_excluded_when_none_is_declared(selector):
    from benchmark_runners.hardware import detect_hardware

    r = selector.select_hardware(None, "bert-tiny", 2)
    present = set(detect_hardware(probe=False).available_kinds())
    assert r["primary_recommendation"] in present and r["primary_recommendation"] == _best_feasible(r)
    assert r["all_scores"]["cuda"]["excluded"].startswith("not available here")
    assert r["all_scores"]["cuda"]["exclusion"]["kind"] == "unavailable" and "cuda" not in r["compatible_hardware"]


def test_a_kind_the_fleet_registered_is_available_though_this_host_lacks_it(selector, monkeypatch):
    """The published compatibility matrix lists the fleet's registered devices per kind: a GPU
    box's CUDA device is a candidate for a selector running on a CPU-only host."""
    import copy

    matrix = copy.deepcopy(selector.compatibility or {"model_families": {}})
    family = matrix["model_families"].setdefault("embedding", {"hardware_compatibility": {}})
    family["hardware_compatibility"].setdefault("cuda", {"compatible": True, "source": "declared_unmeasured"})
    family["hardware_compatibility"]["cuda"]["registered_devices"] = ["cuda-0123456789ab"]
    local = copy.deepcopy(selector.inventory)
    local["platforms"]["cuda"] = {"available": False, "reason": "torch.cuda.is_available() is False"}
    monkeypatch.setattr(selector, "compatibility", matrix)
    monkeypatch.setattr(selector, "inventory", local)
    r = selector.select_hardware(None, "bert-tiny", 2)
    assert r["all_scores"]["cuda"]["excluded"] is None and "cuda" in r["compatible_hardware"]
    assert r["all_scores"]["cuda"]["available_as"] == "registered in the fleet: cuda-0123456789ab"
    for f in matrix["model_families"].values():  # no registered device anywhere: unavailable, both reasons named
        f["hardware_compatibility"].get("cuda", {})["registered_devices"] = []
    r = selector.select_hardware(None, "bert-tiny", 2)
    assert r["all_scores"]["cuda"]["exclusion"]["kind"] == "unavailable"
    assert "torch.cuda.is_available() is False; no registered device of it in the fleet" in r["all_scores"]["cuda"]["excluded"]


def test_a_model_that_does_not_fit_is_excluded(selector):
    # gpt2 at batch 512: tens of GB of activations; the 16 GB of the published M2 reference cannot hold it.
    r = selector.select_hardware(None, "gpt2", 512, available_hardware=["mps", "cuda"])
    assert r["primary_recommendation"] == "cuda"
    assert r["all_scores"]["mps"]["excluded"].startswith("does not fit: needs")
    assert r["all_scores"]["mps"]["exclusion"]["kind"] == "does_not_fit" and "mps" in r["compatible_hardware"]
    assert "of 16.0 GB" in r["all_scores"]["mps"]["excluded"]


def test_latency_bound_excludes_slow_candidates(selector):
    free = selector.select_hardware(None, "bert-tiny", 2, available_hardware=["cpu", "cuda"])
    cpu, cuda = (free["all_scores"][k]["predictions"]["latency"] for k in ("cpu", "cuda"))
    bound = (cpu + cuda) / 2
    r = selector.select_hardware(None, "bert-tiny", 2, available_hardware=["cpu", "cuda"], max_latency_ms=bound)
    slower = "cpu" if cpu > cuda else "cuda"
    assert slower not in [r["primary_recommendation"], *r["fallback_options"]]
    assert "misses the latency bound" in r["all_scores"][slower]["excluded"]
    assert r["all_scores"][slower]["exclusion"]["kind"] == "too_slow" and slower in r["compatible_hardware"]
    with pytest.raises(SelectionError, match="no hardware satisfies"):
        selector.select_hardware(None, "bert-tiny", 2, available_hardware=["cpu", "cuda"], max_latency_ms=min(cpu, cuda) / 10)


def test_tasks_set_the_mode_and_refuse_mismatched_families(selector):
    r = selector.select_hardware_for_task(None, "bert-tiny", "fine_tuning", 2, available_hardware=["cpu", "cuda"])
    assert r["mode"] == "training" and r["task_type"] == "fine_tuning"
    with pytest.raises(SelectionError, match="does not apply"):
        selector.select_hardware_for_task(None, "mobilenet-v2", "speech_recognition")
    with pytest.raises(SelectionError, match="unknown task_type"):
        selector.select_hardware_for_task(None, "bert-tiny", "juggling")


def test_batch_selection_answers_each_model(selector):
    out = selector.select_hardware_batch([{"name": "bert-tiny", "family": "embedding"}, {"name": "no-such-model"}], 1,
                                         available_hardware=["cpu", "cuda"])
    assert out["bert-tiny"]["primary"] in ("cpu", "cuda") and out["no-such-model"]["primary"] is None


def test_config_weights_change_the_choice(measured, artifact, tmp_path):
    memory_only = tmp_path / "memory.json"
    memory_only.write_text(json.dumps({"selection_criteria": {"inference": {
        "latency_weight": 0, "throughput_weight": 0, "memory_weight": 1, "compatibility_weight": 0}},
        "hardware_preferences": {"cpu": {"cost_factor": 1.0, "availability_factor": 1.0, "power_factor": 1.0},
                                 "cuda": {"cost_factor": 1.0, "availability_factor": 1.0, "power_factor": 1.0}}}))
    s = HardwareSelector(benchmark_dir=measured.root, config_path=memory_only, record=False)
    r = s.select_hardware(None, "bert-tiny", 2, available_hardware=["cpu", "cuda"])
    mem = {k: r["all_scores"][k]["predictions"]["memory_mb"] for k in ("cpu", "cuda")}
    assert r["primary_recommendation"] == min(mem, key=mem.get)
    assert r["config_source"].startswith(str(memory_only))


def test_select_cli(measured, artifact):
    from typer.testing import CliRunner

    from devicefit.cli import app

    out = CliRunner().invoke(app, ["select", "--model", "bert-tiny", "--batch-size", "2", "--hardware", "cpu,cuda,webnn",
                                   "--benchmark-dir", str(measured.root), "--json"])
    assert out.exit_code == 0, out.output
    r = json.loads(out.output)
    assert r["primary_recommendation"] in ("cpu", "cuda") and r["all_scores"]["webnn"]["excluded"]
    out = CliRunner().invoke(app, ["select", "--model", "bert-tiny", "--hardware", "cpu", "--max-latency-ms", "0.0001",
                                   "--benchmark-dir", str(measured.root)])
    assert out.exit_code == 2 and "misses the latency bound" in out.output


def test_selection_map_has_the_spec_shape(selector):
    from devicefit.select.selection_map import selection_map

    m = selection_map(selector, ["embedding", "vision"], [1, 8], ["cpu", "cuda", "webnn"])
    assert {"timestamp", "model_families"} <= set(m)
    embedding = m["model_families"]["embedding"]
    small = embedding["model_sizes"]["small"]
    assert set(small) == {"inference", "training"}
    assert small["inference"]["primary"] in ("cpu", "cuda") and isinstance(small["inference"]["fallbacks"], list)
    assert small["inference"]["model"] and "webnn" in small["inference"]["excluded"]
    assert set(embedding["inference"]["batch_sizes"]) == {"1", "8"}
    assert "xlarge" in embedding["no_model"]  # no catalog embedding model has 10B parameters: said, not filled in
    from devicefit import contracts

    contracts.validate("selection_map.json", m)  # its published contract
    with pytest.raises(SelectionError, match="unknown model families"):
        selection_map(selector, ["poetry"])


def test_a_map_traced_beside_a_helper_process_is_the_same_map(measured, artifact, tmp_path, monkeypatch):
    """`make run` traces the map's models on both cores (helpers=None there): the cells must not
    depend on which process traced what, and the helper records no served prediction."""
    import models.op_profile as op_profile
    from devicefit.select.selection_map import selection_map

    monkeypatch.setenv("DEVICEFIT_CACHE_DIR", str(tmp_path / "cache"))  # cold: the helper has traces to do
    op_profile.forget_in_process()  # and none in this process from earlier tests
    def served_lines() -> int:
        return sum(len(p.read_text().splitlines()) for p in measured.root.glob("predictions/served-*.jsonl"))

    args = (["embedding"], [1, 4], ["cpu", "cuda"])
    before = served_lines()
    # A selector that records what it serves, as a server's does; each map from a fresh one.
    helped = selection_map(HardwareSelector(benchmark_dir=measured.root, record=True), *args, helpers=1)
    by_helped = served_lines() - before
    alone = selection_map(HardwareSelector(benchmark_dir=measured.root, record=True), *args, helpers=0)
    by_alone = served_lines() - before - by_helped
    assert by_helped == by_alone > 0  # this process's cells, once each; none from the helper
    for m in (helped, alone):
        m.pop("timestamp")
    assert helped == alone
    assert len(list((tmp_path / "cache" / "trace").glob("*.json"))) >= 4  # the representatives were traced there


def test_traces_started_ahead_are_the_maps_and_a_map_stops_their_helper(measured, artifact, tmp_path, monkeypatch):
    """`devicefit run` traces the map's models in a helper while its results run
    (traces_ahead). The helper traces with a selector that has no predictor; the map's own,
    with the trained one, must then find every trace it needs on disk. A map that starts
    while the helper still runs stops it first."""
    import signal

    import models.op_profile as op_profile
    from devicefit.select import selection_map as sm
    from models.parallel_warm import usable_cpus

    if usable_cpus() < 2:
        pytest.skip("one usable CPU: traces_ahead starts no helper")
    monkeypatch.setenv("DEVICEFIT_CACHE_DIR", str(tmp_path / "cache"))
    op_profile.forget_in_process()
    selector = HardwareSelector(benchmark_dir=measured.root, record=False)
    with sm.traces_ahead(selector.inventory, ["embedding"]) as helper:
        assert helper.wait(300), "the helper did not trace the embedding family's models in 5 minutes"
    assert helper.proc.returncode == 0
    traced: list[str] = []
    real = op_profile._run_trace
    monkeypatch.setattr(op_profile, "_run_trace", lambda spec, *rest: traced.append(spec.name) or real(spec, *rest))
    op_profile.forget_in_process()
    m = sm.selection_map(selector, ["embedding"], helpers=0)
    assert traced == [] and m["model_families"]["embedding"]["model_sizes"]
    with sm.traces_ahead(selector.inventory, ["embedding"]) as helper:
        sm.selection_map(selector, ["embedding"], [1], ["cpu"], helpers=0)
        assert helper.proc.returncode == -signal.SIGKILL  # still importing torch when the map began
    assert sm._ahead == []


def test_memory_constrained_search_prefers_measurements_and_respects_the_cap(measured, artifact):
    from devicefit.predict.api import HardwareModelPredictor
    from devicefit.select.memory_search import MemorySearchError, memory_constrained_search

    predictor = HardwareModelPredictor(benchmark_dir=measured.root, record=False)
    # all-MiniLM-L6-v2 keeps its session measurements (batch 1 and 2, fp32) for the whole run.
    r = memory_constrained_search("all-MiniLM-L6-v2", "cpu", 4096, predictor=predictor, batch_sizes=(1, 2, 8))
    bases = {(c["batch_size"], c["precision"]): c["basis"] for c in r["candidates"]}
    assert bases[(1, "fp32")] == "measured" and bases[(8, "fp32")].startswith("predicted")
    assert r["best"]["memory_mb"] <= 4096
    assert r["best"]["throughput"] == max(c["throughput"] for c in r["candidates"] if c["memory_mb"] <= 4096)
    with pytest.raises(MemorySearchError, match="nothing fits 1 MB"):
        memory_constrained_search("bert-tiny", "cpu", 1, predictor=predictor, batch_sizes=(1,))
    with pytest.raises(MemorySearchError, match="no devicefit backend"):
        memory_constrained_search("bert-tiny", "qnn", 1024, predictor=predictor)



class _StubPredictor:
    """A predictor answering every config with 500 MB (trained_predictor), for a store whose
    measured row lacks its memory figure."""
    def __init__(self, tmp_path):
        from types import SimpleNamespace

        self.paths = SimpleNamespace(database=tmp_path / "absent.duckdb")
        self.predictor = SimpleNamespace(device_of=lambda kind: f"{kind}@cpu-x")

    def predict_performance(self, model, family, kind, batch, seq, mode, precision):
        return {"predictions": {kind: {"latency": 10.0, "throughput": 100.0 * batch, "memory_usage": 500.0,
                                       "memory_interval": [400.0, 600.0], "source": "trained_predictor", "detail": ""}}}


def _row_without_memory():
    return {"model": "bert-tiny", "mode": "inference", "batch_size": 1, "precision": "fp32", "device_kind": "cpu", "status": "ok",
            "mean_ms": 1.5, "p50_ms": 1.5, "throughput_samples_per_s": 666.0, "peak_rss_bytes": None,
            "device_reserved_peak_bytes": None}


def test_a_measured_row_without_memory_is_predicted_in_the_memory_search(tmp_path, monkeypatch):
    """An ok row with no peak memory (peak_rss_bytes is nullable) made `devicefit memory-search`
    end in a TypeError traceback (None / MB); its memory is now the predictor's, and says so."""
    from devicefit.select import memory_search

    monkeypatch.setattr(memory_search, "measured_configs", lambda *a: {(1, "fp32"): _row_without_memory()})
    r = memory_search.memory_constrained_search("bert-tiny", "cpu", 1000, predictor=_StubPredictor(tmp_path), batch_sizes=(1,))
    [fp32] = [c for c in r["candidates"] if c["precision"] == "fp32"]
    assert fp32["basis"] == "predicted (trained_predictor)" and fp32["memory_mb"] == 500.0



def test_a_search_with_no_config_to_run_names_why_not_memory(tmp_path, monkeypatch):
    """OpenVINO training: every candidate is unavailable, and the search said 'nothing fits
    1e+12 MB', as if memory were the problem; a NaN cap said 'nothing fits nan MB'."""
    from devicefit.select import memory_search

    class Unavailable(_StubPredictor):
        def predict_performance(self, model, family, kind, batch, seq, mode, precision):
            return {"predictions": {kind: {"latency": None, "memory_usage": None, "source": "unavailable",
                                           "detail": "OpenVINO is an inference runtime"}}}

    monkeypatch.setattr(memory_search, "measured_configs", lambda *a: {})
    with pytest.raises(memory_search.MemorySearchError, match="no training config on openvino to search: OpenVINO is an inference runtime"):
        memory_search.memory_constrained_search("gpt2", "openvino", 1e12, "training", predictor=Unavailable(tmp_path))
    for cap in (float("nan"), float("inf"), 0.0):
        with pytest.raises(memory_search.MemorySearchError, match="positive finite number of MB"):
            memory_search.memory_constrained_search("gpt2", "cpu", cap, predictor=_StubPredictor(tmp_path))

def test_a_measured_row_without_memory_is_predicted_in_the_resource_requirements(tmp_path):
    from types import SimpleNamespace

    from devicefit.select.resources import HardwareAwareModelClassifier

    classifier = HardwareAwareModelClassifier.__new__(HardwareAwareModelClassifier)
    classifier._measured = {("bert-tiny", "cpu", "inference"): {(1, "fp32"): _row_without_memory()}}
    classifier.selector = SimpleNamespace(predictor=_StubPredictor(tmp_path))
    assert classifier._peak_mb(resolve_model("bert-tiny"), "cpu", 1, "inference") == (500.0, 600.0, "predicted (trained_predictor)")

def test_measured_candidates_are_the_answering_devices_own():
    """A store holding the AMD EPYC's and the Xeon's rows: the candidates measured for "cpu" are
    those of the device the predictor answers "cpu" for, never the other machine's (the Xeon's
    bf16 rows beside the EPYC's fp32 ones, and both machines' load times pooled, before); with
    no trained predictor (a bare kind), this host's rows of the kind as it is."""
    from benchmark_runners.hardware import detect_hardware
    from devicefit.select.memory_search import on_device

    here = detect_hardware(probe=False).platforms["cpu"].devices[0]["fingerprint"]

    def row(host, precision, profile=None):
        return {"device_kind": "cpu", "host_fingerprint": host, "hardware_fingerprint": host, "precision": precision,
                "device_profile": profile}

    rows = [row("cpu-epyc", "fp32"), row("cpu-xeon", "bf16"), row("cpu-epyc", "fp32", "t1"), row(here, "int8"), row(here, "fp32", "t1")]
    assert on_device(rows, "cpu", "cpu@cpu-epyc") == [rows[0]]
    assert on_device(rows, "cpu", "cpu@cpu-epyc+t1") == [rows[2]]
    assert on_device(rows, "openvino", "openvino@cpu-epyc") == []
    assert on_device(rows, "cpu", "cpu") == [rows[3]]


def test_hardware_aware_classification_and_resource_pool(selector):
    from devicefit.select.resources import HardwareAwareModelClassifier

    c = HardwareAwareModelClassifier(selector=selector)
    r = c.classify_model("all-MiniLM-L6-v2")
    selection = selector.select_hardware(None, "all-MiniLM-L6-v2", 1)
    # The recommendation is the selector's pick on this machine (torch CPU or OpenVINO: a measured race).
    assert r["family"] == "embedding" and r["recommended_hardware"] == selection["primary_recommendation"]
    assert r["recommended_hardware"] in ("cpu", "openvino") and 0 < r["confidence"] <= 1
    req = r["resource_requirements"]
    assert req["min_memory_mb"] <= req["recommended_memory_mb"] and req["disk_space_mb"] == round(4 * r["parameters"] / 2**20)
    # Its batch 1 was measured on torch CPU this session, so the CPU requirements come from that row.
    assert c.resource_requirements(r["model_name"], "cpu")["basis"]["min_memory_mb"].endswith("measured")
    assert r["hardware_profile"]["cpu"]["system_available"] and not r["hardware_profile"]["webnn"]["compatible"]
    pool = c.get_optimal_resource_pool_config(["bert-tiny", "all-MiniLM-L6-v2"])
    assert pool["resource_requirements"]["total_memory_mb"] == sum(
        m["resource_requirements"]["recommended_memory_mb"] for m in pool["models"].values())
    chosen = [m["recommended_hardware"] for m in pool["models"].values()]
    assert pool["hardware_recommendations"]["preferred_hardware"] in chosen
    assert c.get_compatible_models_for_hardware(["bert-tiny", "gpt2"], "cpu") == ["bert-tiny", "gpt2"]
    assert c.get_compatible_models_for_hardware(["bert-tiny"], "webnn") == []
    rec = c.recommend_model_for_task("fill-mask", ["cpu"], limit=3)
    assert rec["recommendations"] and all("fill-mask" in resolve_model(m["model_name"]).tasks for m in rec["recommendations"])
    lat = [m["predicted_latency_ms"] for m in rec["recommendations"]]
    assert lat == sorted(lat)


def test_the_selection_map_fills_large_and_xlarge_with_the_models_people_deploy(selector):
    """The config-only catalog entries (7B-70B language models, Whisper large) stand for the
    large (1B-10B) and xlarge (>= 10B) categories; a cell no candidate can hold says why."""
    from devicefit.select.selection_map import selection_map

    m = selection_map(selector, ["text_generation", "audio"], [1], ["cpu", "cuda"])
    text = m["model_families"]["text_generation"]
    assert {"small", "medium", "large", "xlarge"} <= set(text["model_sizes"]) and not text.get("no_model")
    large, xlarge = text["model_sizes"]["large"]["inference"], text["model_sizes"]["xlarge"]["inference"]
    assert resolve_model(large["model"]).config_only and resolve_model(xlarge["model"]).config_only
    for cell in (large, xlarge):
        assert cell["primary"] in ("cpu", "cuda") or "no hardware satisfies" in cell["reason"], cell
    assert m["model_families"]["audio"]["model_sizes"]["large"]["inference"]["model"] == "whisper-large-v3"


def test_generation_is_selected_on_tpot_and_ttft_with_their_bounds(selector):
    """Mode (or task) generation ranks on the generation figures: TPOT, TTFT, decode tokens/s
    and memory with the KV cache; --max-tpot-ms excludes a candidate with its predicted TPOT,
    and the bounds are refused outside the generation scenario."""
    r = selector.select_hardware(None, "gpt2", 1, 128, mode="generation", available_hardware=["cpu", "cuda"], new_tokens=16)
    assert r["mode"] == "generation" and r["sequence_length"] == 128 and r["new_tokens"] == 16
    for kind in ("cpu", "cuda"):
        p = r["all_scores"][kind]["predictions"]
        assert p["tpot_ms"] > 0 and p["throughput"] == pytest.approx(1e3 / p["tpot_ms"]) and p["kv_cache_mb"] > 0
        assert {"tpot", "ttft", "throughput"} <= set(r["all_scores"][kind]["relative_scores"])
    assert "TPOT" in r["explanation"] and "tokens/s" in r["explanation"]
    tpot = {k: r["all_scores"][k]["predictions"]["tpot_ms"] for k in ("cpu", "cuda")}
    slow, fast = sorted(tpot, key=tpot.get, reverse=True)
    bound = (tpot[slow] + tpot[fast]) / 2
    bounded = selector.select_hardware(None, "gpt2", 1, 128, mode="generation", available_hardware=["cpu", "cuda"], max_tpot_ms=bound)
    assert bounded["primary_recommendation"] == fast
    assert bounded["all_scores"][slow]["exclusion"]["kind"] == "too_slow" and "TPOT" in bounded["all_scores"][slow]["excluded"]
    task = selector.select_hardware_for_task(None, "gpt2", "generation", 1, available_hardware=["cpu", "cuda"])
    assert task["mode"] == "generation" and task["sequence_length"] == 256 and task["new_tokens"] == 64
    with pytest.raises(SelectionError, match="max_tpot_ms: apply to mode generation"):
        selector.select_hardware(None, "gpt2", 1, mode="inference", max_tpot_ms=50)
    with pytest.raises(SelectionError, match="mode generation: .*"):
        selector.select_hardware(None, "bert-tiny", 1, mode="generation")
    with pytest.raises(SelectionError, match="new tokens must be an integer"):
        selector.select_hardware(None, "gpt2", 1, mode="generation", new_tokens=0)
    with pytest.raises(SelectionError, match="holds at most 1024 positions"):
        selector.select_hardware(None, "gpt2", 1, 1000, mode="generation", new_tokens=64)
    for bad in (-5.0, 0.0, float("nan"), float("inf")):
        with pytest.raises(SelectionError, match="max_tpot_ms must be a positive number"):
            selector.select_hardware(None, "gpt2", 1, mode="generation", max_tpot_ms=bad)


def test_the_selection_map_answers_text_generation_in_the_generation_scenario(selector):
    from devicefit.select.selection_map import selection_map

    m = selection_map(selector, ["text_generation", "embedding"], [1], ["cpu", "cuda"])
    small = m["model_families"]["text_generation"]["model_sizes"]["small"]["inference"]
    assert small["scenario"] == "generation" and m["model_families"]["text_generation"]["inference"]["batch_sizes"]["1"]["scenario"] == "generation"
    assert m["model_families"]["text_generation"]["model_sizes"]["small"]["training"]["scenario"] == "training"
    assert m["model_families"]["embedding"]["model_sizes"]["small"]["inference"]["scenario"] == "inference"


def test_a_kind_without_a_memory_figure_is_bounded_by_the_hosts():
    """WebGPU had no memory figure, so nothing excluded it: a 70B model (277 GB) was recommended
    for the browser on a 25 GB machine. A software adapter (SwiftShader) holds its model in the
    host's RAM; a real adapter's own memory is unknown, but its model loads through the host's,
    which bounds it from above, labelled so."""
    from devicefit.select.selector import device_memory_bytes

    cpu = {"name": "EPYC", "memory_total_bytes": 25e9}
    software = {"platforms": {"cpu": {"devices": [cpu]}, "webgpu": {"devices": [{"name": "SwiftShader", "software": True}]}}}
    memory, source = device_memory_bytes("webgpu", software, None)
    assert memory == 25e9 and "the cpu webgpu runs on" in source
    real = {"platforms": {"cpu": {"devices": [cpu]}, "webgpu": {"devices": [{"name": "NVIDIA", "software": False}]}}}
    memory, source = device_memory_bytes("webgpu", real, None)
    assert memory == 25e9 and "an upper bound: webgpu's own memory is unknown" in source
    assert device_memory_bytes("webnn", {"platforms": {}}, None) == (None, "no memory figure")  # no host figure either
    assert device_memory_bytes("cpu", {"platforms": {"cpu": {"devices": [{"name": "x"}]}}}, None) == (None, "no memory figure")


def test_a_restricted_cpu_offers_the_cores_its_budget_allows():
    """Resource requirements name the cores the process may use: in a container with a 2-CPU
    quota on a 64-core host that is 2, the threads its rows were measured with, not 64."""
    from devicefit.select.resources import cpu_cores_of

    assert cpu_cores_of({"physical_cores": 8, "cpu_budget": {"threads": 8}}) == (8, "physical cores of this machine's CPU")
    cores, basis = cpu_cores_of({"physical_cores": 64, "usable_cpus": 2.0, "cpu_budget": {"threads": 2}})
    assert cores == 2 and "cgroup CPU quota" in basis
    assert cpu_cores_of({}) == (None, "physical cores of this machine's CPU")


def test_a_selector_given_an_inventory_never_detects_this_host_even_before_any_predictor(tmp_path, monkeypatch):
    """Cold (no predictor published), the predictor answered on a fresh detection even when the
    selector was handed an inventory: where none was cached, the selection map's tracing helper
    probed the CPU and started a browser beside the results run. It now answers on the
    selector's inventory; without one, the host is detected once, for both."""
    import benchmark_runners.hardware as hardware

    inventory = hardware.detect_hardware(probe=False).to_json()
    calls = []

    def detect(*args, **kwargs):
        calls.append((args, kwargs))
        raise AssertionError("detect_hardware called although an inventory was given")

    monkeypatch.setattr(hardware, "detect_hardware", detect)
    cold = HardwareSelector(benchmark_dir=tmp_path / "empty", inventory=inventory, record=False)
    assert calls == [] and cold.predictor.prediction_models.get("cold_start") and cold.inventory is inventory

    class Detected:
        def to_json(self):
            return inventory

    monkeypatch.setattr(hardware, "detect_hardware", lambda *a, **k: calls.append(a) or Detected())
    HardwareSelector(benchmark_dir=tmp_path / "empty", record=False)
    assert len(calls) == 1
