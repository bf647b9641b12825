"""The analysis's recommendation per batch size chooses among what this host and the fleet have,
as /hardware/select does, unless the caller names the hardware: it passed every kind as declared,
which skips the availability rule, and recommended rocm on a CPU-only host (found by a fault
hunt, 2026-11-30). Cold start: no measurement needed."""
import pytest

from devicefit.select.analysis import analyze_model
from devicefit.select.selector import HardwareSelector, SelectionError


@pytest.fixture(scope="module")
def cold_selector(tmp_path_factory):
    return HardwareSelector(benchmark_dir=tmp_path_factory.mktemp("cold-data"), record=False)


def _selected(selector: HardwareSelector, **kwargs) -> dict:
    try:
        r = selector.select_hardware(None, "bert-tiny", 1, **kwargs)
    except SelectionError as exc:
        return {"primary": None, "fallbacks": [], "reason": str(exc)}
    return {"primary": r["primary_recommendation"], "fallbacks": r["fallback_options"]}


def test_the_analysis_recommends_what_the_selector_recommends_here(cold_selector):
    analysis = analyze_model(cold_selector, "bert-tiny", None, [1])
    assert analysis["inference"]["recommendations"]["1"] == _selected(cold_selector)
    recommended = [analysis["inference"]["recommendations"]["1"]["primary"], *analysis["inference"]["recommendations"]["1"]["fallbacks"]]
    absent = [k for k in recommended if k is not None and not cold_selector.availability(k)[0]]
    assert not absent, f"recommended {absent}, which neither this host nor the fleet has"
    assert set(analysis["hardware_platforms"]) >= {"cpu", "cuda", "rocm"}  # predictions still cover every kind


def test_hardware_the_caller_names_is_chosen_among_as_declared(cold_selector):
    analysis = analyze_model(cold_selector, "bert-tiny", None, [1], ["cuda", "cpu"])
    assert analysis["inference"]["recommendations"]["1"] == _selected(cold_selector, available_hardware=["cuda", "cpu"])
