"""A transformers class's facts (is it a model class, its main input) are taken once per class
and transformers version and read back by later processes without importing the class's
modeling module; a broken entry is taken again, and a name that is not one is never looked up."""
import json
import os
import subprocess
import sys

import pytest

from models import class_facts as cf
from models.derived_cache import entry_path


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("DEVICEFIT_CACHE_DIR", str(tmp_path / "cache"))
    cf._memo.clear()  # the process's own memo, in front of the disk
    yield tmp_path / "cache"
    cf._memo.clear()


def _counting(monkeypatch) -> list[str]:
    calls: list[str] = []
    real = cf._inspect
    monkeypatch.setattr(cf, "_inspect", lambda name: calls.append(name) or real(name))
    return calls


def test_model_classes_other_classes_and_missing_names_are_told_apart(cache):
    assert cf.class_facts("BertModel") == cf.ClassFacts(True, True, "input_ids")
    assert cf.class_facts("ResNetForImageClassification").main_input_name == "pixel_values"
    assert cf.class_facts("WhisperModel").main_input_name == "input_features"
    config_class = cf.class_facts("BertConfig")
    assert config_class.exists and not config_class.is_model
    assert cf.class_facts("NoSuchModelAnywhere") == cf.ClassFacts(False, False, None)


@pytest.mark.parametrize("name", ["../../etc/passwd", "os.system", "Bert Model", "", "x" * 300, 7, None])
def test_a_name_that_is_not_a_class_name_is_never_looked_up(cache, monkeypatch, name):
    calls = _counting(monkeypatch)
    with pytest.raises(ValueError, match="not a class name"):
        cf.class_facts(name)
    assert calls == [] and not cache.exists()


def test_facts_are_read_back_instead_of_taken_again(cache, monkeypatch):
    calls = _counting(monkeypatch)
    first = cf.class_facts("BertModel")
    assert cf.class_facts("BertModel") == first and calls == ["BertModel"]


@pytest.mark.parametrize("damage", [
    {"exists": True, "is_model": "yes", "main_input_name": "input_ids"},
    {"exists": False, "is_model": True, "main_input_name": "input_ids"},
    {"exists": True, "is_model": True, "main_input_name": "../pixel_values"},
    {"exists": True, "is_model": True},
    ["not", "an", "entry"],
])
def test_a_damaged_entry_is_taken_again(cache, monkeypatch, damage):
    cf.class_facts("BertModel")
    path = entry_path("class_facts", {"architecture": "BertModel"})
    path.write_text(json.dumps(damage))
    cf._memo.clear()  # a later process: it reads the damaged entry
    calls = _counting(monkeypatch)
    assert cf.class_facts("BertModel") == cf.ClassFacts(True, True, "input_ids") and calls == ["BertModel"]


def test_a_later_process_resolves_a_model_directory_without_importing_its_modeling_module(cache, tiny_models):
    """The parent of a measurement (the CLI, the API) checks a directory's architecture and
    builds its inputs' shapes; once the facts are cached, the family's modeling module (and
    transformers' modeling_utils, seconds of imports) stays out of it."""
    code = ("import sys\n"
            "from models.resolve import resolve_model\n"
            "from models.inputs import input_signature\n"
            f"spec = resolve_model({str(tiny_models['text'])!r})\n"
            "sig = input_signature(spec, 2, 16)\n"
            "print(sorted(sig.inputs), spec.architecture)\n"
            "print(sorted(m for m in sys.modules if m.startswith('transformers.models.') and '.modeling_' in m and '.auto.' not in m))\n"
            "print('transformers.modeling_utils' in sys.modules)\n")
    env = {**os.environ, "DEVICEFIT_CACHE_DIR": str(cache)}
    runs = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180, env=env) for _ in range(2)]
    for run in runs:
        assert run.returncode == 0, run.stderr[-2000:]
    first, second = (run.stdout.splitlines() for run in runs)
    assert first[0] == second[0] and "input_ids" in first[0]
    assert first[1] != "[]" and first[2] == "True"  # the first process imported the class to learn its facts
    assert second[1] == "[]" and second[2] == "False"
