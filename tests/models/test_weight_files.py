"""Weights in a local model directory are user input: devicefit loads safetensors from the
directory itself and nothing else. A pickle (pytorch_model.bin) is never unpickled, and a
safetensors index never sends transformers to a file outside the directory."""
import json
import shutil

import pytest
import torch

from models.catalog import InvalidModelError
from models.loading import build
from models.resolve import resolve_model


@pytest.fixture(scope="module")
def saved(tiny_models, tmp_path_factory):
    """The tiny BERT saved with its (random) weights as safetensors."""
    from transformers import BertForMaskedLM

    directory = tmp_path_factory.mktemp("weights") / "tiny-bert"
    model = BertForMaskedLM(resolve_model(str(tiny_models["text"])).build_config())
    model.save_pretrained(directory)
    assert (directory / "model.safetensors").is_file()
    return directory, model.state_dict()


def _config_only(source, directory):
    directory.mkdir()
    shutil.copy(source / "config.json", directory / "config.json")
    return directory


def test_safetensors_weights_still_load(saved):
    directory, state = saved
    built = build(resolve_model(str(directory)))
    assert built.weights_recipe.startswith("pretrained weights from")
    assert torch.equal(built.model.state_dict()["bert.embeddings.word_embeddings.weight"],
                       state["bert.embeddings.word_embeddings.weight"])


def test_a_pickle_weights_file_is_never_unpickled(saved, tmp_path, monkeypatch):
    """Before: transformers torch.load-ed pytorch_model.bin (a pickle) and the model loaded."""
    directory, state = saved
    target = _config_only(directory, tmp_path / "pickled")
    torch.save(state, target / "pytorch_model.bin")
    spec = resolve_model(str(target))
    assert spec.has_weights
    loads = []
    monkeypatch.setattr(torch, "load", lambda *a, **k: loads.append(a) or pytest.fail("torch.load called"))
    with pytest.raises(InvalidModelError, match="pytorch_model.bin: pickle, which devicefit never unpickles"):
        build(spec)
    assert not loads


@pytest.mark.parametrize("shard", ["../outside/model.safetensors", "ABSOLUTE", "../outside/not-weights.txt"])
def test_an_index_never_points_outside_the_directory(saved, tmp_path, shard):
    """Before: transformers opened whatever path the index named (an absolute path, '../..'; a
    file not ending in .safetensors was even read as a pickle)."""
    directory, state = saved
    outside = tmp_path / "outside"
    outside.mkdir()
    shutil.copy(directory / "model.safetensors", outside / "model.safetensors")
    (outside / "not-weights.txt").write_text("secret")
    shard = str(outside / "model.safetensors") if shard == "ABSOLUTE" else shard
    target = _config_only(directory, tmp_path / "indexed")
    (target / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": {k: shard for k in state}}))
    with pytest.raises(InvalidModelError, match="names shard .*not a .safetensors file in the model directory"):
        build(resolve_model(str(target)))


def test_an_index_of_shards_in_the_directory_loads(saved, tmp_path):
    directory, state = saved
    target = _config_only(directory, tmp_path / "sharded")
    shutil.copy(directory / "model.safetensors", target / "model-00001-of-00001.safetensors")
    (target / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {}, "weight_map": {k: "model-00001-of-00001.safetensors" for k in state}}))
    assert build(resolve_model(str(target))).weights_recipe.startswith("pretrained weights from")
