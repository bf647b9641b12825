"""A stored row's model, for learning from it: shipped configs from this checkout, other
recorded paths only where they hold the row's model, names never as paths."""
import json

import pytest

from models.analysis import parameter_count
from models.catalog import UnknownModelError
from models.recorded import SHIPPED_CONFIGS, RecordedModelMismatch, resolve_recorded_model
from models.resolve import resolve_model

MIXTRAL = "mixtral-small-4layers"


def test_a_shipped_config_recorded_by_another_checkout_is_read_from_this_one():
    spec = resolve_model(str(SHIPPED_CONFIGS / f"{MIXTRAL}.json"))
    row = {"model": MIXTRAL, "model_path": f"/somewhere/else/benchmarks/configs/{MIXTRAL}.json",
           "parameters": parameter_count(spec), "architecture": spec.architecture}
    assert resolve_recorded_model(row).path == spec.path
    # A path that climbs out of the folder is not a shipped config.
    with pytest.raises(FileNotFoundError):
        resolve_recorded_model({**row, "model_path": f"/x/benchmarks/configs/../configs/{MIXTRAL}.json"})


def test_a_recorded_path_holding_another_model_here_is_refused(tmp_path):
    """The row measured a 2-layer gpt2 from this path on its machine; here the path holds a
    6-layer one: refused with both counts, and training counts the row under its own reason."""
    from benchmark_runners.hardware import detect_hardware
    from devicefit.predict import training
    from devicefit.predict.hardware_specs import device_specs

    config = tmp_path / "my-gpt2.json"
    config.write_text(json.dumps({**resolve_model("gpt2").config, "n_layer": 2}))
    measured = parameter_count(resolve_model(str(config)))
    row = {"model": "my-gpt2", "model_path": str(config), "parameters": measured, "architecture": "GPT2LMHeadModel"}
    assert resolve_recorded_model(row).name == "my-gpt2"
    config.write_text(json.dumps({**resolve_model("gpt2").config, "n_layer": 6}))
    with pytest.raises(RecordedModelMismatch, match=f"the row measured {measured:,}"):
        resolve_recorded_model(row)
    specs = device_specs(detect_hardware().to_json())
    full = {**row, "status": "ok", "backend": "torch", "device": "cpu", "device_kind": "cpu", "precision": "fp32",
            "mode": "inference", "batch_size": 1, "seq_length": 128, "mean_ms": 10.0, "p50_ms": 10.0,
            "throughput_samples_per_s": 100.0, "peak_rss_bytes": 10**9}
    data = training.training_data([full], specs)
    assert data.skipped == {training.MISMATCH_SKIP: 1} and len(data) == 0


def test_a_name_is_never_looked_up_as_a_path(tmp_path):
    """A row naming a directory that holds a model here, without a recorded path, is not that
    model: names from landing files are catalog, registry or alias names only."""
    config = tmp_path / "config.json"
    config.write_text(json.dumps(resolve_model("bert-tiny").config))
    assert resolve_model(str(tmp_path)).path  # a path the CLI would accept...
    with pytest.raises(UnknownModelError):
        resolve_recorded_model({"model": str(tmp_path)})  # ...is no name
    assert resolve_recorded_model({"model": "bert-tiny"}).name == "bert-tiny"
