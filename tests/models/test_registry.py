"""The model registry: names the operator gives local model directories, the only local models the
API resolves; and ModelNames, which never treats a name as a path."""
import json
import re
import threading

import pytest

from models.catalog import InvalidModelError, UnknownModelError
from models.registry import ModelNames, RegistryError, read_registry, register_model, registry_file, unregister_model
from models.resolve import resolve_model


def test_register_read_resolve_and_remove(tmp_path, tiny_models):
    spec = register_model(tmp_path, tiny_models["text"], "my-bert")
    assert spec.name == "my-bert" and spec.source == "local" and spec.path == tiny_models["text"].resolve()
    assert read_registry(tmp_path) == {"my-bert": tiny_models["text"].resolve()}
    document = json.loads(registry_file(tmp_path).read_text())
    assert document["version"] == 1 and document["models"]["my-bert"]["registered_at"]
    assert register_model(tmp_path, tiny_models["text"], "my-bert").name == "my-bert"  # the same again: a no-op
    with pytest.raises(RegistryError, match="already registered"):
        register_model(tmp_path, tiny_models["causal"], "MY-BERT")
    names, warnings = ModelNames.load(tmp_path)
    assert warnings == [] and names.resolve("My-Bert").name == "my-bert"
    assert resolve_model("my-bert").path == tiny_models["text"].resolve()  # this process resolves it too
    assert unregister_model(tmp_path, "my-bert") == tiny_models["text"].resolve()
    assert read_registry(tmp_path) == {}
    with pytest.raises(RegistryError, match="no model named"):
        unregister_model(tmp_path, "my-bert")


def test_default_name_is_the_directory_name_and_catalog_names_are_refused(tmp_path, tiny_models):
    assert register_model(tmp_path, tiny_models["image"]).name == "tiny-vit"
    with pytest.raises(RegistryError, match="taken by the catalog model 'gpt2'"):
        register_model(tmp_path, tiny_models["causal"], "GPT2")
    with pytest.raises(RegistryError, match="not allowed"):
        register_model(tmp_path, tiny_models["causal"], "../evil")


def test_bad_directories_are_refused_and_nothing_is_written(tmp_path, tiny_models):
    (tmp_path / "empty").mkdir()
    (tmp_path / "huge").mkdir()
    (tmp_path / "huge" / "config.json").write_text(json.dumps({"model_type": "gpt2", "n_layer": 400, "n_embd": 8192}))
    for directory, message in ((tmp_path / "empty", "no config.json"), (tmp_path / "missing", "not a directory"),
                               (tmp_path / "huge", "exceeds the limit of 160 layers")):
        with pytest.raises(InvalidModelError, match=message):
            register_model(tmp_path / "data", directory)
    assert not registry_file(tmp_path / "data").exists()


def test_concurrent_registrations_keep_every_entry(tmp_path, tiny_models):
    dirs = list(tiny_models.items())
    threads = [threading.Thread(target=register_model, args=(tmp_path, d, f"m-{kind}")) for kind, d in dirs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert set(read_registry(tmp_path)) == {f"m-{kind}" for kind, _ in dirs}


def test_a_malformed_registry_is_a_clear_error(tmp_path):
    registry_file(tmp_path).write_text("{oops")
    with pytest.raises(RegistryError, match="malformed"):
        read_registry(tmp_path)


def test_a_registry_nested_past_the_decoder_is_malformed_not_a_recursion_error(tmp_path):
    """`devicefit models` and the API's start-up ended in RecursionError on such a file."""
    registry_file(tmp_path).write_text('{"version": 1, "models": ' + "[" * 100_000 + "]" * 100_000 + "}")
    with pytest.raises(RegistryError, match="malformed .*nested too deeply"):
        read_registry(tmp_path)


def test_model_names_never_look_at_the_file_system(tmp_path, tiny_models):
    names, _ = ModelNames.load(tmp_path / "empty-data")
    assert names.resolve("BERT-TINY").name == "bert-tiny" and names.resolve("google/vit-base-patch16-224").name == "vit-base-patch16-224"
    messages = set()
    for query in (str(tiny_models["text"]), "/etc", str(tmp_path / "missing"), "/root"):
        with pytest.raises(UnknownModelError) as info:
            names.resolve(query)
        assert not isinstance(info.value, InvalidModelError)
        # Close names come from the text alone (catalog names and aliases), never from the disk.
        messages.add(re.sub(r" Did you mean: [^?]*\?", "", str(info.value).replace(query, "<name>")))
    assert len(messages) == 1 and "never paths" in messages.pop()


def test_model_dirs_are_served_by_their_directory_names(tmp_path, tiny_models):
    names, _ = ModelNames.load(tmp_path, [tiny_models["seq2seq"]])
    assert names.resolve("tiny-t5").path == tiny_models["seq2seq"].resolve()
    with pytest.raises(InvalidModelError, match="not a directory"):
        ModelNames.load(tmp_path, [tmp_path / "missing"])


def test_a_registered_model_that_broke_is_left_out_with_a_warning(tmp_path, tiny_models):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(tiny_models["text"], copy)
    register_model(tmp_path / "data", copy, "fragile")
    (copy / "config.json").write_text(json.dumps({"model_type": "bert", "architectures": [3]}))
    names, warnings = ModelNames.load(tmp_path / "data")
    assert names.names() == [] and len(warnings) == 1 and "fragile" in warnings[0] and "architectures" in warnings[0]


def test_names_that_would_share_a_landing_file_are_refused(tmp_path, tiny_models):
    """A partition's landing file names the model with '/' as '__' (devicefit.landing.safe_name):
    `org/x` and `org__x` wrote one file, each run replacing the other's rows."""
    from devicefit.landing import landing_path

    data = tmp_path / "data"
    register_model(data, tiny_models["text"], name="org/x")
    assert landing_path(tmp_path, "partition:cpu|org/x") == landing_path(tmp_path, "partition:cpu|org__x")
    with pytest.raises(RegistryError, match=r"'org__x' would share landing files with 'org/x'"):
        register_model(data, tiny_models["image"], name="org__x")
    with pytest.raises(RegistryError, match="would share landing files with 'org/x'"):
        register_model(data, tiny_models["causal"], name="ORG__X")
    assert list(read_registry(data)) == ["org/x"]
    register_model(data, tiny_models["text"], name="org/x")  # the same directory and name again: still a no-op
