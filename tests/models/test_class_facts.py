"""A transformers class's facts (is it a model class, its main input, does it generate) are taken once per class
and transformers version and read back by later processes without importing the class's
modeling module; a broken entry is taken again, and a name that is not one is never looked up."""
import json

import pytest

from models import class_facts as cf
from models.derived_cache import entry_path
from tests.conftest import PRINT_MODELING_MODULES, two_processes


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
    bert = cf.class_facts("BertModel")
    assert (bert.exists, bert.is_model, bert.main_input_name, bert.can_generate) == (True, True, "input_ids", False)
    assert bert.forward_parameters[:2] == ("self", "input_ids") and "logits_to_keep" not in bert.forward_parameters
    gpt2 = cf.class_facts("GPT2LMHeadModel")
    assert gpt2.can_generate and "logits_to_keep" in gpt2.forward_parameters
    assert cf.class_facts("T5ForConditionalGeneration").can_generate and cf.class_facts("WhisperForConditionalGeneration").can_generate
    assert not cf.class_facts("GPT2Model").can_generate  # no language-model head
    assert cf.class_facts("ResNetForImageClassification").main_input_name == "pixel_values"
    assert cf.class_facts("WhisperModel").main_input_name == "input_features"
    config_class = cf.class_facts("BertConfig")
    assert config_class.exists and not config_class.is_model
    assert cf.class_facts("NoSuchModelAnywhere") == cf.ClassFacts(False, False, None, False, ())


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
    {"exists": True, "is_model": True, "main_input_name": "input_ids"},  # written before can_generate was a fact
    {"exists": True, "is_model": False, "main_input_name": "input_ids", "can_generate": True, "forward_parameters": []},
    {"exists": True, "is_model": True, "main_input_name": "input_ids", "can_generate": 1, "forward_parameters": []},
    {"exists": True, "is_model": True, "main_input_name": "input_ids", "can_generate": False, "forward_parameters": "self"},
    {"exists": True, "is_model": True, "main_input_name": "input_ids", "can_generate": False, "forward_parameters": ["a b"]},
    {"exists": True, "is_model": True, "main_input_name": "input_ids", "can_generate": False, "forward_parameters": ["x"] * 201},
    ["not", "an", "entry"],
])
def test_a_damaged_entry_is_taken_again(cache, monkeypatch, damage):
    whole = cf.class_facts("BertModel")
    path = entry_path("class_facts", {"architecture": "BertModel"})
    path.write_text(json.dumps(damage))
    cf._memo.clear()  # a later process: it reads the damaged entry
    calls = _counting(monkeypatch)
    assert cf.class_facts("BertModel") == whole and calls == ["BertModel"]


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
            + PRINT_MODELING_MODULES +
            "print('transformers.modeling_utils' in sys.modules)\n")
    first, second = two_processes(code, cache)
    assert first[0] == second[0] and "input_ids" in first[0]
    assert first[1] != "[]" and first[2] == "True"  # the first process imported the class to learn its facts
    assert second[1] == "[]" and second[2] == "False"


def test_whether_a_model_generates_and_its_prefill_are_answered_without_importing_its_modeling_module(cache):
    """generation_reason (the selection map's, make run's and the API's question) and the
    prefill's traced profile (whose key holds whether the forward takes logits_to_keep) read
    cached facts: the second process never imports gpt2's or bert's modeling module for them."""
    code = ("from benchmark_runners.generation import generation_reason\n"
            "from models.op_profile import prefill_profile\n"
            "from models.resolve import resolve_model\n"
            "print(generation_reason(resolve_model('gpt2')), bool(generation_reason(resolve_model('bert-tiny'))),\n"
            "      int(prefill_profile(resolve_model('gpt2'), 16).flops.sum()))\n" + PRINT_MODELING_MODULES)
    first, second = two_processes(code, cache)
    assert first[0] == second[0] and first[0].startswith("None True ") and int(first[0].split()[2]) > 0
    assert first[1] != "[]" and second[1] == "[]"


def test_a_mixtures_experts_and_a_decode_steps_kernels_are_read_back_without_importing_torch(cache):
    """A generation prediction asks a mixture's routing (models.analysis.experts_of, counted on a
    meta model) and the decode step's kernel count (op_profile.decode_step_ops, a meta trace):
    both stored, a later process reads them without importing torch or transformers (9.2 s ->
    2.7 s for a warm `devicefit recommend --task text-generation --hw cuda` on the 2-core EPYC)."""
    code = ("import sys\n"
            "from models.analysis import experts_of\n"
            "from models.op_profile import decode_step_ops\n"
            "from models.resolve import resolve_model\n"
            "moe = experts_of(resolve_model('mixtral-8x7b'))\n"
            "print(moe.experts, moe.per_token, moe.params, moe.decoder_layers, moe.interface, decode_step_ops(resolve_model('gpt2')))\n"
            "print('torch' in sys.modules, 'transformers' in sys.modules)\n")
    first, second = two_processes(code, cache)
    assert first[0] == second[0] and first[0].startswith(f"8 2 {32 * 8 * 3 * 4096 * 14336} 32 ")
    assert int(first[0].split()[-1]) > 0
    assert first[1] == "True True" and second[1] == "False False"


@pytest.mark.parametrize("damage", [{"experts": 0}, {"per_token": 9}, {"decoder_layers": 99}, {"interface": 1}])
def test_an_experts_entry_no_count_could_give_is_counted_again(cache, damage):
    """An edited entry with 0 experts divided by zero in the decode roofline; it is counted again."""
    from dataclasses import asdict

    from models import analysis
    from models.resolve import resolve_model

    spec = resolve_model("mixtral-8x7b")
    analysis._experts.clear()
    good = analysis.experts_of(spec)
    path = entry_path("experts", asdict(spec))
    path.write_text(json.dumps({**asdict(good), **damage}))
    analysis._experts.clear()
    try:
        assert analysis.experts_of(spec) == good
        assert json.loads(path.read_text()) == asdict(good)  # written over
    finally:
        analysis._experts.clear()
