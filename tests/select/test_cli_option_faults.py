"""Option values the CLI took unchecked (found by a fault hunt): a --family outside the catalog's
families (a typo such as `Embedding` made select, predict and analyze answer for a family no
compatibility matrix row names, so hardware its measurements had ruled out came first, and the
typo came back as model_family), and a `recommend --limit` below 1 (-1 sliced the last model off,
0 answered none with exit 0). Each is refused, as the API and `benchmark --model-family` refuse
them, before anything is read or predicted."""
import pytest
from typer.testing import CliRunner

from devicefit.cli import app
from models.catalog import FAMILIES


@pytest.fixture
def data_dir(tmp_path, monkeypatch):
    """An empty data directory (no predictor, no store): a refused option never reaches them."""
    path = tmp_path / "data"
    path.mkdir()
    monkeypatch.setenv("DEVICEFIT_DATA_DIR", str(path))
    monkeypatch.setenv("DEVICEFIT_LOCK_DIR", str(tmp_path / "locks"))
    return path


FAMILY_COMMANDS = {
    "select": ["select", "--model", "bert-tiny", "--json"],
    "predict": ["predict", "--model", "bert-tiny", "--json"],
    "analyze": ["analyze", "--model", "bert-tiny", "--json"],
}


@pytest.mark.parametrize("command", sorted(FAMILY_COMMANDS))
@pytest.mark.parametrize("family", ["Embedding", "no such family", "text-generation", ""])
def test_an_unknown_family_is_refused_naming_the_known_families(data_dir, command, family):
    out = CliRunner().invoke(app, [*FAMILY_COMMANDS[command], "--family", family])
    assert out.exit_code == 2, out.output
    assert f"--family must be one of {', '.join(FAMILIES)}, got '{family}'" in out.output, out.output
    assert "model_family" not in out.output  # no answer for the unknown family


@pytest.mark.parametrize("family,near", [("Embedding", "embedding"), ("text-generation", "text_generation"),
                                         ("TEXT GENERATION", "text_generation")])
def test_a_family_in_another_spelling_is_refused_like_benchmark_does_with_the_right_one_named(data_dir, family, near):
    """`benchmark --model-family` and the API take a family spelled exactly; the CLI's --family
    does too, and says which family was meant."""
    out = CliRunner().invoke(app, [*FAMILY_COMMANDS["select"], "--family", family])
    assert out.exit_code == 2 and f"(did you mean '{near}'?)" in out.output, out.output


def test_select_checks_its_model_family_spelling_too(data_dir):
    out = CliRunner().invoke(app, ["select", "--model", "bert-tiny", "--model-family", "Embedding", "--json"])
    assert out.exit_code == 2 and "got 'Embedding'" in out.output, out.output


def test_analyze_checks_the_family_without_a_model_too(data_dir, tmp_path):
    out = CliRunner().invoke(app, ["analyze", "--family", "Vision", "--output", str(tmp_path / "analysis.csv")])
    assert out.exit_code == 2 and "got 'Vision'" in out.output, out.output


def test_the_family_check_passes_every_catalog_family_and_no_family():
    from devicefit.cli.common import model_family

    assert [model_family(f) for f in FAMILIES] == list(FAMILIES)
    assert model_family(None) is None


@pytest.mark.parametrize("limit", ["-1", "0", "-100"])
def test_recommend_refuses_a_limit_below_one(data_dir, limit):
    out = CliRunner().invoke(app, ["recommend", "--task", "fill-mask", "--hardware", "cpu", "--limit", limit])
    assert out.exit_code == 2, out.output
    assert "--limit" in out.output and "[]" not in out.output, out.output


@pytest.mark.parametrize("limit", [0, -1, True, 2.5])
def test_recommend_model_for_task_refuses_a_limit_that_is_not_a_positive_integer(data_dir, limit):
    """A Python caller cannot reach the slice either: ranked[:-1] dropped the last model and
    ranked[:0] answered none. The error is a SelectionError (a DevicefitError, and a ValueError)."""
    from devicefit.select.resources import HardwareAwareModelClassifier
    from devicefit.select.selector import SelectionError

    classifier = HardwareAwareModelClassifier(benchmark_dir=data_dir)
    with pytest.raises(SelectionError, match="limit must be a positive integer"):
        classifier.recommend_model_for_task("fill-mask", ["cpu"], limit=limit)
    with pytest.raises(ValueError):
        classifier.recommend_model_for_task("fill-mask", ["cpu"], limit=limit)
