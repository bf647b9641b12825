import json

import pytest

from models.analysis import parameter_count
from models.catalog import FAMILIES, UnknownModelError, load_catalog, load_local_model, resolve_model
from models.classifier import classify_spec

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
    with pytest.raises(FileNotFoundError, match="no config.json"):
        load_local_model(tmp_path)


def test_local_directory_with_corrupt_config_is_a_clear_error(tmp_path):
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        load_local_model(tmp_path)


def test_local_directory_without_model_type_is_a_clear_error(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"hidden_size": 8}))
    with pytest.raises(ValueError, match="no model_type"):
        load_local_model(tmp_path)
