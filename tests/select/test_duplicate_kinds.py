"""A kind (or batch size) named twice is asked once: it is never its own fallback, and the lists
a map or analysis echoes hold each once. Cold start (no published predictor): no measurement needed."""
import pytest

from devicefit.select.selector import HardwareSelector


@pytest.fixture(scope="module")
def cold_selector(tmp_path_factory):
    return HardwareSelector(benchmark_dir=tmp_path_factory.mktemp("cold-data"), record=False)


def test_a_kind_named_twice_is_not_its_own_fallback(cold_selector):
    r = cold_selector.select_hardware(None, "bert-tiny", 1, available_hardware=["cpu", "cpu"])
    assert r["primary_recommendation"] == "cpu" and r["fallback_options"] == [] and r["compatible_hardware"] == ["cpu"]


def test_map_and_analysis_ask_each_kind_and_batch_once(cold_selector):
    from devicefit.select.analysis import analyze_model
    from devicefit.select.selection_map import selection_map

    m = selection_map(cold_selector, ["embedding"], [1, 1], ["cpu", "cpu"])
    assert m["hardware_platforms"] == ["cpu"] and m["batch_sizes"] == [1]
    cell = m["model_families"]["embedding"]["inference"]["batch_sizes"]["1"]
    assert cell["primary"] == "cpu" and cell["fallbacks"] == []
    a = analyze_model(cold_selector, "bert-tiny", None, [1, 1], ["cpu", "cpu"])
    assert a["hardware_platforms"] == ["cpu"] and a["batch_sizes"] == [1]
    assert a["inference"]["recommendations"]["1"] == {"primary": "cpu", "fallbacks": []}
