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
        count = parameter_count(spec)
        assert abs(count - spec.published_parameters) / spec.published_parameters < 0.01, spec.name


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
