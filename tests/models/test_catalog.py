import json

import pytest

from models.analysis import parameter_count
from models.catalog import FAMILIES, InvalidModelError, UnknownModelError, load_catalog, load_local_model
from models.classifier import classify_spec
from models.resolve import resolve_model

# The published figures the issue names; each must be matched within 1%.
PUBLISHED = {
    "bert-base-uncased": 109.5e6,
    "gpt2": 124.4e6,
    "t5-small": 60.5e6,
    "vit-base-patch16-224": 86.6e6,
    "whisper-tiny": 37.8e6,
    "clip-vit-base-patch32": 151.3e6,
}


def test_catalog_has_at_least_15_models_across_all_five_families():
    catalog = load_catalog()
    assert len(catalog) >= 15
    families = {classify_spec(spec).family for spec in catalog.values()}
    assert families == set(FAMILIES)


@pytest.mark.parametrize("name,published", PUBLISHED.items())
def test_parameter_counts_match_published_within_1_percent(name, published):
    count = parameter_count(resolve_model(name))
    assert abs(count - published) / published < 0.01, f"{name}: {count:,} vs published {published:,.0f}"


def test_every_catalog_model_matches_its_own_published_count_within_1_percent():
    for spec in load_catalog().values():
        # Where transformers builds the model differently from its checkpoint, the entry says by
        # how much and why (flan-t5-xl: transformers 5 ties T5's lm_head to the input embedding).
        count = parameter_count(spec) - spec.built_parameters_differ_by
        assert abs(count - spec.published_parameters) / spec.published_parameters < 0.01, spec.name
        assert (spec.built_parameters_differ_by == 0) == (spec.built_parameters_differ_why is None), spec.name


# The models people deploy, shipped as configs only (issue 18): the Hub's exact parameter counts
# (safetensors metadata), each matched within 1% by the model built on the meta device.
DEPLOYED = {
    "llama-2-7b": 6_738_415_616, "llama-2-13b": 13_015_864_320, "llama-2-70b": 68_976_648_192, "llama-3-8b": 8_030_261_248,
    "llama-3-70b": 70_553_706_496, "mistral-7b": 7_241_732_096, "mixtral-8x7b": 46_702_792_704, "qwen2.5-7b": 7_615_616_512,
    "phi-3-mini": 3_821_079_552, "gemma-2b": 2_506_172_416, "falcon-7b": 6_921_720_704, "flan-t5-xl": 2_849_757_184,
    "vit-large-patch16-224": 304_326_632, "clip-vit-large-patch14": 427_616_513, "whisper-large-v3": 1_543_490_560,
}


@pytest.mark.parametrize("name,published", DEPLOYED.items())
def test_config_only_models_people_deploy_match_their_published_counts(name, published):
    spec = resolve_model(name)
    assert spec.config_only and spec.published_parameters == published
    count = parameter_count(spec) - spec.built_parameters_differ_by
    assert abs(count - published) / published < 0.01, f"{name}: {count:,} vs published {published:,}"


def test_a_mixture_of_experts_counts_active_parameters_apart_from_its_total():
    """Mixtral-8x7B: 32 layers of 8 experts, each 3 x 4096 x 14336 = 176,160,768 weights; a token
    uses 2 of 8, so 6/8 of 32 x 8 x 176,160,768 = 33,822,867,456 are idle per token:
    46,702,792,704 - 33,822,867,456 = 12,879,925,248 active (the model card's 12.9B)."""
    from models.analysis import active_parameter_count

    mixtral = resolve_model("mixtral-8x7b")
    assert parameter_count(mixtral) == 46_702_792_704
    assert active_parameter_count(mixtral) == 12_879_925_248 == mixtral.published_active_parameters
    assert active_parameter_count(resolve_model("llama-2-7b")) == parameter_count(resolve_model("llama-2-7b"))


def test_config_only_models_are_not_swept_by_default_but_resolve_everywhere():
    from devicefit.profiles import FULL, QUICK, Selection
    from models.catalog import catalog_names, swept_catalog_names

    assert set(DEPLOYED) <= set(catalog_names()) and not set(DEPLOYED) & set(swept_catalog_names())
    assert not set(DEPLOYED) & set(FULL.models) and not set(DEPLOYED) & set(QUICK.models)
    assert set(DEPLOYED) <= set(Selection(all_models=True).model_names())  # named or --all: measured where they fit
    assert Selection(models=("llama-2-7b",)).model_names() == ["llama-2-7b"]


def test_resolve_by_name_case_insensitive_and_by_hub_id():
    assert resolve_model("BERT-BASE-UNCASED").name == "bert-base-uncased"
    assert resolve_model("google/vit-base-patch16-224").name == "vit-base-patch16-224"


def test_unknown_model_names_close_catalog_matches():
    with pytest.raises(UnknownModelError) as info:
        resolve_model("bert-base-uncase")
    assert "bert-base-uncased" in info.value.suggestions
    assert "Unknown model 'bert-base-uncase'" in str(info.value)
    assert "Did you mean" in str(info.value)


def test_unknown_model_with_nothing_close_says_so_without_suggestions():
    with pytest.raises(UnknownModelError) as info:
        resolve_model("zzzz-qqqq")
    assert info.value.suggestions == []


def test_local_directory_with_real_weights(minilm_dir):
    spec = resolve_model(str(minilm_dir))
    assert spec.source == "local"
    assert spec.has_weights
    assert spec.architecture == "BertModel"
    assert abs(parameter_count(spec) - 22.7e6) / 22.7e6 < 0.01


def test_local_directory_without_config_is_a_clear_error(tmp_path):
    with pytest.raises(InvalidModelError, match="no config.json"):
        load_local_model(tmp_path)
    with pytest.raises(ValueError, match="no config.json"):  # every command's handler of bad input catches it
        resolve_model(str(tmp_path))


def test_local_directory_with_corrupt_config_is_a_clear_error(tmp_path):
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        load_local_model(tmp_path)


def test_local_directory_without_model_type_is_a_clear_error(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"hidden_size": 8}))
    with pytest.raises(ValueError, match="no model_type"):
        load_local_model(tmp_path)


@pytest.mark.parametrize("architectures, message", [
    (7, "must be a list of class names"),
    ([1, 2], "must be a list of class names"),
    ("BertModel", "must be a list of class names"),
    (["os"], "none of them a model class"),
    (["NoSuchModelForAnything"], "none of them a model class"),
    (["AutoConfig"], "none of them a model class"),
    # PreTrainedModels without a forward pass: accepted, they failed at the first trace with
    # "TypeError: _forward_unimplemented() got an unexpected keyword argument 'input_ids'"
    (["PreTrainedModel"], "none of them a model class"),
    (["BertPreTrainedModel"], "none of them a model class"),
    (["x; import os"], "is not a class name"),
])
def test_an_odd_architectures_entry_is_a_clear_error(tmp_path, architectures, message):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "bert", "architectures": architectures}))
    with pytest.raises(InvalidModelError, match=message) as info:
        resolve_model(str(tmp_path))
    assert str(tmp_path) in str(info.value) and str(tmp_path) not in info.value.reason


def _nested(depth: int) -> dict:
    node: dict = {}
    for _ in range(depth):
        node = {"k": node}
    return node


@pytest.mark.parametrize("config, message", [
    ([1, 2], "must hold a JSON object"),
    ({"model_type": 5}, "model_type must be a model type name"),
    ({"model_type": "no-such-type"}, "is not one transformers"),
    ({"model_type": "bert", "num_hidden_layers": "many"}, "num_hidden_layers must be a non-negative whole number"),
    ({"model_type": "gpt2", "n_layer": 400, "n_embd": 8192, "vocab_size": 1e6}, "n_layer = 400 exceeds the limit of 160 layers"),
    ({"model_type": "clip", "text_config": {"vocab_size": 10**7}}, "text_config.vocab_size = 10000000 exceeds the limit"),
    ({"model_type": "bert", "hidden_act": _nested(20)}, "nests deeper"),
])
def test_a_bad_config_is_a_clear_error_before_anything_is_built(tmp_path, config, message):
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(InvalidModelError, match=message):
        load_local_model(tmp_path)


def test_an_oversized_config_file_is_not_read(tmp_path):
    from models.limits import MAX_CONFIG_BYTES

    (tmp_path / "config.json").write_text('{"model_type": "bert", "pad": "' + "x" * MAX_CONFIG_BYTES + '"}')
    with pytest.raises(InvalidModelError, match="byte limit"):
        load_local_model(tmp_path)


def test_every_catalog_model_is_within_the_config_limits():
    from models.limits import check_config_limits

    for spec in load_catalog().values():
        check_config_limits(spec.config, spec.name)


def test_local_directories_of_every_modality_still_load(tiny_models):
    for directory in tiny_models.values():
        spec = resolve_model(str(directory))
        assert spec.source == "local" and spec.architecture == json.loads((directory / "config.json").read_text())["architectures"][0]


@pytest.mark.parametrize("query,name", [
    ("bert", "bert-base-uncased"), ("--model bert".split()[1], "bert-base-uncased"), ("vit-base", "vit-base-patch16-224"),
    ("llama-7b", "llama-2-7b"), ("LLAMA-7B", "llama-2-7b"), ("meta-llama/Llama-2-7b-hf", "llama-2-7b"),
    ("Llama-2-7b-hf", "llama-2-7b"), ("Mixtral-8x7B-v0.1", "mixtral-8x7b"), ("whisper-large", "whisper-large-v3"),
    ("Phi-3-mini-4k-instruct", "phi-3-mini"),
])
def test_names_users_type_resolve_to_catalog_models(query, name):
    assert resolve_model(query).name == name


def test_an_unknown_name_gets_its_three_closest_models():
    with pytest.raises(UnknownModelError) as info:
        resolve_model("lama-7b")
    assert len(info.value.suggestions) == 3 and info.value.suggestions[0] == "llama-2-7b"
    assert len(set(info.value.suggestions)) == 3  # an alias and its model are one suggestion


def test_every_alias_names_a_catalog_model():
    from models.aliases import alias_names
    from models.catalog import catalog_names

    assert set(alias_names().values()) <= set(catalog_names())
    assert not set(alias_names()) & {n.lower() for n in catalog_names()}  # a catalog name is never shadowed


def test_a_registered_model_wins_over_an_alias_and_the_server_takes_aliases_not_paths(tiny_models, tmp_path):
    from dataclasses import replace

    from models.registry import ModelNames

    names = ModelNames({"bert": replace(resolve_model(str(tiny_models["text"])), name="bert")})
    assert names.resolve("bert").source == "local"  # the operator's own "bert"
    assert ModelNames({}).resolve("bert").name == "bert-base-uncased"
    config = tmp_path / "my-llama.json"
    config.write_text(json.dumps(resolve_model("llama-2-7b").config))
    with pytest.raises(UnknownModelError):
        ModelNames({}).resolve(str(config))  # never a path on a server


def test_a_bare_config_file_is_a_model(tmp_path):
    config = tmp_path / "my-llama.json"
    config.write_text(json.dumps(resolve_model("llama-2-7b").config))
    spec = resolve_model(str(config))
    assert (spec.name, spec.source, spec.has_weights, spec.architecture) == ("my-llama", "local", False, "LlamaForCausalLM")
    assert parameter_count(spec) == 6_738_415_616
    (tmp_path / "config.json").write_text(json.dumps(resolve_model("gpt2").config))
    assert resolve_model(str(tmp_path / "config.json")).path == tmp_path.resolve()  # config.json: its directory
    (tmp_path / "broken.json").write_text('{"model_type": "llama", "hidden_size": "big"}')
    with pytest.raises(InvalidModelError, match="broken.json"):
        resolve_model(str(tmp_path / "broken.json"))


@pytest.mark.parametrize("sizes, cause", [
    ({"num_attention_heads": 0}, "ZeroDivisionError"),  # BertSelfAttention: hidden_size % heads
    ({"hidden_size": 0, "num_attention_heads": 1}, "ZeroDivisionError"),  # head size 0 ** -0.5
])
def test_a_config_the_model_class_cannot_be_built_from_is_a_clear_error(tmp_path, sizes, cause):
    """The config object accepts these sizes (so the directory loads), the model's constructor
    does not: every command that counts, traces or guards memory said ZeroDivisionError with a
    traceback (`devicefit analyze/predict/distributed/benchmark --model DIR`). It is the
    config's fault, said as an InvalidModelError naming the directory, and the benchmark's
    memory guard steps aside for the worker to record a failed row."""
    from benchmark_runners.hardware import detect_hardware
    from benchmark_runners.memory_guard import memory_refusal
    from benchmark_runners.records import BenchmarkConfig

    (tmp_path / "config.json").write_text(json.dumps({**load_catalog()["bert-tiny"].config, **sizes}))
    spec = resolve_model(str(tmp_path))
    with pytest.raises(InvalidModelError, match=f"cannot build BertModel from this config: {cause}") as info:
        parameter_count(spec)
    assert str(tmp_path) in str(info.value)
    assert memory_refusal(BenchmarkConfig(model=str(tmp_path), device="cpu"), detect_hardware(probe=False)) is None


def test_a_local_directory_named_like_another_model_gets_a_name_of_its_own(tmp_path):
    """A directory called bert-tiny holding another config was named bert-tiny: its rows and the
    catalog model's were one model's in the store (aggregates group by name). It is now named
    bert-tiny-local-<digest of its config>, the same at every resolve; an unclaimed name stays."""
    from models.resolve import resolve_model

    config = {**load_catalog()["bert-tiny"].config, "hidden_size": 64, "intermediate_size": 128}
    names = {}
    for name in ("bert-tiny", "BERT-Tiny", "bert"):  # the catalog's name, in another case, an alias
        directory = tmp_path / name
        directory.mkdir()
        (directory / "config.json").write_text(json.dumps(config))
        names[name] = resolve_model(str(directory)).name
        assert resolve_model(str(directory)).source == "local" and names[name].startswith(f"{name}-local-")
        assert len(names[name]) == len(name) + len("-local-") + 8 and resolve_model(str(directory)).name == names[name]
    (tmp_path / "bert-tiny" / "config.json").write_text(json.dumps({**config, "num_hidden_layers": 1}))
    assert resolve_model(str(tmp_path / "bert-tiny")).name != names["bert-tiny"]  # another config, another model
    free = tmp_path / "my-own-tiny"
    free.mkdir()
    (free / "config.json").write_text(json.dumps(config))
    assert resolve_model(str(free)).name == "my-own-tiny"


def test_a_registered_directory_given_by_its_path_is_its_registered_model(tmp_path, monkeypatch):
    from models.registry import register_model
    from models.resolve import resolve_model

    monkeypatch.setenv("DEVICEFIT_DATA_DIR", str(tmp_path / "data"))
    directory = tmp_path / "bert-tiny"
    directory.mkdir()
    (directory / "config.json").write_text(json.dumps({**load_catalog()["bert-tiny"].config, "hidden_size": 64}))
    assert resolve_model(str(directory)).name.startswith("bert-tiny-local-")
    register_model(tmp_path / "data", directory, name="my-tiny")
    spec = resolve_model(str(directory))
    assert (spec.name, spec.source, spec.path) == ("my-tiny", "local", directory.resolve())


def test_a_broken_registered_model_of_the_same_name_does_not_stop_another_directory(tmp_path, monkeypatch):
    """Whether a directory's name is taken was decided by loading the model registered under it,
    so another directory's broken or removed entry of that name made this one an error."""
    from models.registry import register_model
    from models.resolve import resolve_model

    monkeypatch.setenv("DEVICEFIT_DATA_DIR", str(tmp_path / "data"))
    config = json.dumps({**load_catalog()["bert-tiny"].config, "hidden_size": 64})
    for where in ("a", "b"):
        (tmp_path / where / "mine").mkdir(parents=True)
        (tmp_path / where / "mine" / "config.json").write_text(config)
    register_model(tmp_path / "data", tmp_path / "a" / "mine")
    (tmp_path / "a" / "mine" / "config.json").write_text("{broken")
    assert resolve_model(str(tmp_path / "b" / "mine")).name.startswith("mine-local-")


def test_a_local_config_that_leaves_out_the_vocabulary_gets_ids_inside_the_one_transformers_builds(tmp_path):
    """A BERT config.json without vocab_size builds a 30,522-token embedding (transformers'
    default); the inputs failed with "token ids need a vocabulary size" instead of using it."""
    import json

    import torch

    from models.inputs import input_signature
    from models.loading import build_model
    from models.tensors import make_inputs

    (tmp_path / "config.json").write_text(json.dumps({
        "model_type": "bert", "architectures": ["BertModel"], "hidden_size": 32, "num_hidden_layers": 1,
        "num_attention_heads": 2, "intermediate_size": 64, "max_position_embeddings": 64}))
    spec = load_local_model(tmp_path)
    sig = input_signature(spec, 2, seq_length=16)
    assert sig.inputs["input_ids"].high == build_model(spec).config.vocab_size == 30522
    with torch.no_grad():
        out = build_model(spec)(**make_inputs(sig, "cpu"))
    assert out.last_hidden_state.shape == (2, 16, 32)
    assert "vocab_size" not in spec.config  # the config as written is what names and keys the model
