"""The catalog's facts are counted once per model, config and code version, and read back after."""
import json

import pytest

import devicefit.catalog_facts as catalog_facts_module
from devicefit.catalog_facts import FIELDS, catalog_facts
from models.resolve import resolve_model


@pytest.fixture
def two_models(tmp_path, monkeypatch):
    monkeypatch.setenv("DEVICEFIT_CACHE_DIR", str(tmp_path / "cache"))
    specs = {name: resolve_model(name) for name in ("bert-tiny", "gpt2")}
    monkeypatch.setattr(catalog_facts_module, "load_catalog", lambda: specs)
    return specs


def test_facts_are_counted_once_then_read_from_the_cache(two_models, tmp_path, monkeypatch):
    first = catalog_facts()
    assert [r["name"] for r in first] == ["bert-tiny", "gpt2"] and all(set(r) == set(FIELDS) for r in first)
    assert first[1]["parameters"] == 124_439_808
    entries = sorted((tmp_path / "cache" / "catalog_facts").glob("*.json"))
    assert len(entries) == 2

    def no_counting(spec):
        raise AssertionError(f"{spec.name} counted again")

    monkeypatch.setattr(catalog_facts_module, "_count", no_counting)
    assert catalog_facts() == json.loads(json.dumps(first))


def test_a_corrupt_entry_or_another_config_is_counted_again(two_models, tmp_path, monkeypatch):
    catalog_facts()
    entries = sorted((tmp_path / "cache" / "catalog_facts").glob("*.json"))
    entries[0].write_text("{not json")
    counted = []
    real = catalog_facts_module._count
    monkeypatch.setattr(catalog_facts_module, "_count", lambda spec: counted.append(spec.name) or real(spec))
    rows = catalog_facts()
    assert len(counted) == 1 and all(set(r) == set(FIELDS) for r in rows)
    # a changed config is a new entry, not the old one's counts
    gpt2 = two_models["gpt2"]
    two_models["gpt2"] = type(gpt2)(**{**gpt2.__dict__, "config": {**gpt2.config, "n_layer": 2}})
    small = {r["name"]: r for r in catalog_facts()}["gpt2"]
    assert counted[1:] == ["gpt2"] and small["parameters"] < 124_439_808  # counted for the new config, not recalled


def test_an_entry_that_is_not_this_models_row_is_counted_again(two_models, tmp_path, monkeypatch):
    first = catalog_facts()
    entries = {json.loads(p.read_text())["name"]: p for p in (tmp_path / "cache" / "catalog_facts").glob("*.json")}
    entries["gpt2"].write_text(json.dumps({**first[0], "name": "bert-tiny"}))  # another model's row under gpt2's key
    entries["bert-tiny"].write_text("[" * 100_000 + "]" * 100_000)  # deeper than the parser recurses
    counted = []
    real = catalog_facts_module._count
    monkeypatch.setattr(catalog_facts_module, "_count", lambda spec: counted.append(spec.name) or real(spec))
    assert catalog_facts() == json.loads(json.dumps(first)) and sorted(counted) == ["bert-tiny", "gpt2"]


def test_an_unwritable_cache_still_answers(two_models, tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("DEVICEFIT_CACHE_DIR", str(blocker))  # a file where the directory should be
    assert [r["name"] for r in catalog_facts()] == ["bert-tiny", "gpt2"]
