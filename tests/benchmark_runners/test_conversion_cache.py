"""`devicefit cache` and `cache prune` (benchmark_runners.conversion_cache): real entries, made by
the converters from the suite's tiny local models and the catalog's bert-tiny, then copied as an
earlier installation would have written them (its identity changed, its key made from it)."""
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from benchmark_runners import cache_prune
from benchmark_runners.cache_prune import CacheInUse, prune
from benchmark_runners.conversion_cache import all_entries, conversion_entries

pytest.importorskip("openvino")
pytest.importorskip("onnx")


def _config(model, **kw):
    from benchmark_runners.records import BenchmarkConfig

    return BenchmarkConfig(model=str(model), **kw)


@pytest.fixture
def data_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("DEVICEFIT_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("DEVICEFIT_CACHE_DIR", str(tmp_path / "derived"))
    monkeypatch.setenv("DEVICEFIT_LOCK_DIR", str(tmp_path / "locks"))
    return tmp_path / "data"


def _convert_openvino(model):
    from benchmark_runners.backends.openvino_backend import OpenVINOBackend
    from models.resolve import resolve_model

    return OpenVINOBackend()._convert(resolve_model(str(model)), _config(model, device="openvino:CPU", backend="openvino"))


def _export_onnx(model):
    from benchmark_runners.browser import export
    from models.resolve import resolve_model

    return export.export(resolve_model(str(model)), _config(model, device="wasm", backend="browser"))


def _as_if_made_with(meta, **changes):
    """Copy the entry whose metadata is `meta` under the key an installation with `changes` in its
    identity gives it (what that installation wrote, byte for byte otherwise); the new metadata."""
    document = json.loads(meta.read_text())
    identity = {**document["identity"], **changes}
    key = hashlib.sha256(json.dumps(identity, sort_keys=True, default=str).encode()).hexdigest()[:16]
    stem = meta.name[: -len(".json")]
    new_stem = stem[:-16] + key
    for path in meta.parent.iterdir():
        if path.name.startswith(stem):
            shutil.copy(path, path.with_name(new_stem + path.name[len(stem):]))
    new_meta = meta.with_name(new_stem + ".json")
    new_meta.write_text(json.dumps({**document, "identity": identity}))
    return new_meta


def _by_name(entries):
    return {e.name: e for e in entries}


def test_fresh_conversions_are_current_and_the_default_prune_keeps_them(data_dir, tiny_models):
    ov = _convert_openvino(tiny_models["text"])
    onnx = _export_onnx(tiny_models["text"])
    entries = conversion_entries()
    assert {(e.cache, e.state, e.model) for e in entries} == {("openvino", "current", "tiny-bert"), ("onnx", "current", "tiny-bert")}
    assert all(e.size_bytes > 0 and e.last_used is not None for e in entries)
    ov_entry = next(e for e in entries if e.cache == "openvino")
    assert sorted(os.path.basename(p).rsplit(".", 1)[-1] for p in ov_entry.paths) == ["bin", "json", "npy", "xml"]
    report = prune(entries)
    assert report.removed == [] and report.kept == 2
    assert _convert_openvino(tiny_models["text"]).source != "converted from torch" and ov.key in ov_entry.name
    assert _export_onnx(tiny_models["text"]).source == "disk cache" and onnx.onnx.exists()


def test_an_entry_of_another_torch_version_or_catalog_config_is_stale_and_pruned_the_current_one_kept(data_dir, tiny_models):
    _convert_openvino(tiny_models["text"])
    exported = _export_onnx("bert-tiny")
    [ov_meta] = (data_dir / "cache" / "openvino").glob("*.json")
    old_torch = _as_if_made_with(ov_meta, torch="2.12.0+cpu")
    old_catalog = _as_if_made_with(exported.onnx.with_suffix(".json"), config={**json.loads(
        exported.onnx.with_suffix(".json").read_text())["identity"]["config"], "hidden_size": 64})
    entries = _by_name(conversion_entries())
    stale = entries[old_torch.stem]
    assert stale.state == "stale" and "torch '2.12.0+cpu' (here: '" in stale.reason and stale.model == "tiny-bert"
    assert entries[old_catalog.stem].state == "stale" and "catalog's config of bert-tiny has changed" in entries[old_catalog.stem].reason
    assert entries[ov_meta.stem].state == "current" and entries[exported.onnx.stem].state == "current"

    report = prune(list(entries.values()))
    assert sorted(e.name for e in report.removed) == sorted([old_torch.stem, old_catalog.stem])
    assert report.freed_bytes >= stale.size_bytes > 0
    left = {p.name for p in (data_dir / "cache" / "openvino").iterdir()} | {p.name for p in (data_dir / "cache" / "onnx").iterdir()}
    assert not [n for n in left if n.startswith((old_torch.stem, old_catalog.stem))]
    assert {e.state for e in conversion_entries()} == {"current"}
    assert _convert_openvino(tiny_models["text"]).source != "converted from torch"  # what was kept is what is read


def test_a_local_models_entries_are_stale_once_its_directory_is_gone(data_dir, tiny_models, tmp_path):
    copy = shutil.copytree(tiny_models["image"], tmp_path / "my-vit")
    _convert_openvino(copy)
    assert {e.state for e in conversion_entries()} == {"current"}
    shutil.rmtree(copy)
    [entry] = conversion_entries()
    assert entry.state == "stale" and f"model directory {copy} is gone" in entry.reason


def test_a_local_models_entries_are_stale_once_its_config_or_weights_change(data_dir, tiny_models, tmp_path):
    copy = shutil.copytree(tiny_models["text"], tmp_path / "my-bert")
    _convert_openvino(copy)
    config = json.loads((copy / "config.json").read_text())
    (copy / "config.json").write_text(json.dumps({**config, "intermediate_size": 128}))
    [entry] = conversion_entries()
    assert entry.state == "stale" and entry.reason == f"the config of {copy} has changed since"
    (copy / "config.json").write_text(json.dumps(config))
    assert [e.state for e in conversion_entries()] == ["current"]
    from models.loading import build
    from models.resolve import resolve_model

    build(resolve_model(str(copy)), None).model.save_pretrained(copy)  # weights added: a run now loads them
    (copy / "config.json").write_text(json.dumps(config))  # (save_pretrained rewrites it too)
    [entry] = conversion_entries()
    assert entry.state == "stale" and entry.reason == f"{copy} holds pretrained weights now, random when converted"


def test_an_entry_of_a_catalog_model_no_longer_in_the_catalog_is_stale(data_dir, monkeypatch):
    from models import catalog

    exported = _export_onnx("bert-tiny")
    everything = catalog.load_catalog()
    monkeypatch.setattr(catalog, "load_catalog", lambda: {k: v for k, v in everything.items() if k != "bert-tiny"})
    [entry] = conversion_entries()
    assert entry.state == "stale" and entry.reason == "no catalog model is named bert-tiny any more"
    assert [e.name for e in prune([entry]).removed] == [entry.name] and not exported.onnx.exists()


def test_incomplete_entries_and_abandoned_staging_go_a_live_writers_staging_and_unknown_files_stay(data_dir, tiny_models):
    _convert_openvino(tiny_models["text"])
    cache = data_dir / "cache" / "openvino"
    [meta] = cache.glob("*.json")
    half = _as_if_made_with(meta, torch="2.11.0")
    half.unlink()  # a conversion of an earlier version that stopped before its metadata
    live = cache / ".staging-live"
    live.mkdir()
    lock = os.open(live / ".writer.lock", os.O_RDWR | os.O_CREAT)
    fcntl.flock(lock, fcntl.LOCK_EX)  # a writer at work (this process)
    dead = cache / ".staging-dead"
    dead.mkdir()
    (dead / ".writer.lock").touch()
    (dead / "part.bin").write_bytes(b"\0" * 4096)
    (cache / "notes.txt").write_text("mine")
    try:
        entries = _by_name(conversion_entries())
        assert entries[half.stem].state == "incomplete" and "no readable metadata" in entries[half.stem].reason
        assert entries[".staging-live"].state == "converting" and entries[".staging-dead"].state == "abandoned"
        assert entries["notes.txt"].state == "unrecognised"
        removed = {e.name for e in prune(list(entries.values()), everything=True).removed}
        assert removed == {half.stem, ".staging-dead", meta.stem}  # --all: never a live staging or a file it did not write
        assert sorted(p.name for p in cache.iterdir()) == [".staging-live", "notes.txt"]
    finally:
        os.close(lock)


def test_an_entry_read_is_marked_used_and_unused_days_goes_by_it(data_dir, tiny_models):
    _convert_openvino(tiny_models["text"])
    [meta] = (data_dir / "cache" / "openvino").glob("*.json")
    month_ago = time.time() - 30 * 86400
    os.utime(meta, (month_ago, month_ago))
    assert cache_prune.chosen(conversion_entries(), unused_days=7) != []
    _convert_openvino(tiny_models["text"])  # read from the disk cache: used now
    assert time.time() - meta.stat().st_mtime < 600
    assert cache_prune.chosen(conversion_entries(), unused_days=7) == []
    assert prune(conversion_entries(), unused_days=7).removed == [] and meta.exists()


def test_current_entries_are_not_pruned_while_a_measurement_holds_a_device_lock(data_dir, tiny_models):
    _convert_openvino(tiny_models["text"])
    [meta] = (data_dir / "cache" / "openvino").glob("*.json")
    old = _as_if_made_with(meta, openvino="2024.0.0")
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time\nfrom benchmark_runners.lock_files import hold_devices\n"
                               "with hold_devices(['cpu'], wait_s=0):\n    print('held', flush=True)\n    time.sleep(60)\n"],
                              stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": os.getcwd()})
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(CacheInUse, match=rf"not pruning entries a measurement may read: device cpu is still measuring for pid {holder.pid}"):
            prune(conversion_entries(), everything=True)
        assert meta.exists() and old.exists()
        report = prune(conversion_entries())  # what no run reads goes all the same
        assert [e.name for e in report.removed] == [old.stem] and meta.exists()
    finally:
        holder.kill()
        holder.wait()
    assert {e.name for e in prune(conversion_entries(), everything=True).removed} == {meta.stem}


_EXPORTER = {"optimum-intel": "1.22.0", "transformers": "4.46.3", "torch": "2.5.1"}


def test_openvino_genai_entries_are_judged_by_their_recorded_identity(data_dir, monkeypatch):
    from benchmark_runners.backends import openvino_genai

    monkeypatch.setattr(openvino_genai, "exporter_versions", lambda python: _EXPORTER)  # with or without the export venv here
    installed = openvino_genai.installation_identity()
    cache = openvino_genai.cache_dir()
    from models.catalog import load_catalog

    for torch_version in (installed["torch"], "1.0.0"):
        identity = {"model": "gpt2", "config": load_catalog()["gpt2"].config, "path": None, "weights": "random", **installed,
                    "torch": torch_version}
        key = hashlib.sha256(json.dumps(identity, sort_keys=True, default=str).encode()).hexdigest()[:16]
        entry = cache / f"gpt2-{key}"
        entry.mkdir(parents=True)
        (entry / "openvino_model.xml").write_text("<net/>")
        (entry / "devicefit-export.json").write_text(json.dumps({"identity": identity}))
    (cache / "gpt2-0123456789abcdef").mkdir()  # an export that stopped before its metadata
    states = sorted((e.state, e.reason.split(" (")[0]) for e in conversion_entries())
    assert states == [("current", ""), ("incomplete", "no readable metadata or IR: an export that did not finish; exported again"),
                      ("stale", "made with torch '1.0.0'")]


def test_the_derived_cache_is_listed_by_kind_and_pruned_only_when_asked(data_dir, tmp_path):
    kind = tmp_path / "derived" / "trace"
    kind.mkdir(parents=True)
    a, b = "a" * 24 + ".json", "b" * 24 + ".json"  # named as models.derived_cache.entry_path names them
    (kind / a).write_text("{}")
    (kind / b).write_text("{}")
    old = time.time() - 10 * 86400
    os.utime(kind / a, (old, old))
    [entry] = all_entries()
    assert entry.cache == "derived" and entry.name == "trace" and entry.files == 2
    assert prune(all_entries()).removed == []
    assert [e.name for e in prune(all_entries(), unused_days=5).removed] == ["trace"]
    assert sorted(p.name for p in kind.iterdir()) == [b]  # only the entries unused that long


def test_the_cache_commands(data_dir, tiny_models):
    from devicefit.cli import app

    _convert_openvino(tiny_models["text"])
    [meta] = (data_dir / "cache" / "openvino").glob("*.json")
    old = _as_if_made_with(meta, transformers="4.0.0")
    runner = CliRunner()
    listed = runner.invoke(app, ["cache", "--json"])
    assert listed.exit_code == 0, listed.output
    assert sorted(e["state"] for e in json.loads(listed.output) if e["cache"] != "derived") == ["current", "stale"]
    dry = runner.invoke(app, ["cache", "prune", "--dry-run"])
    assert dry.exit_code == 0 and "would remove openvino/" + old.stem in dry.output.replace("\n", "") and old.exists()
    for args, message in ((["--model", "nosuch"], "no cache entry records the model 'nosuch'"),
                          (["--unused-days", "-1"], "--unused-days must be a number of days >= 0"),
                          (["--unused-days", "nan"], "--unused-days must be a number of days >= 0"),
                          (["--all", "--model", "tiny-bert"], "--all removes every entry")):
        refused = runner.invoke(app, ["cache", "prune", *args])
        assert refused.exit_code == 2 and message in refused.output.replace("\n", ""), (args, refused.output)
    before = runner.invoke(app, ["cache", "--json", "prune", "--dry-run"])  # the group's --json holds for prune too
    assert before.exit_code == 0 and json.loads(before.output)["dry_run"] is True
    done = runner.invoke(app, ["cache", "prune", "--json"])
    assert done.exit_code == 0 and [e["name"] for e in json.loads(done.output)["removed"]] == [old.stem]
    assert not old.exists() and meta.exists()
    by_model = runner.invoke(app, ["cache", "prune", "--model", "tiny-bert"])
    assert by_model.exit_code == 0 and not meta.exists()


def test_entries_of_a_converter_that_cannot_run_here_now_are_unknown_and_kept(data_dir, tiny_models, monkeypatch):
    from benchmark_runners.backends import openvino_backend

    _convert_openvino(tiny_models["text"])

    def gone():
        raise ModuleNotFoundError("No module named 'openvino'")

    monkeypatch.setattr(openvino_backend, "installation_identity", gone)
    [entry] = conversion_entries()
    # A package missing or broken for now (an upgrade half-way) says nothing about what a run reads
    # once it is back: the default prune keeps the entries, --all removes them.
    assert entry.state == "unknown" and entry.reason == ("this installation cannot tell whether it reads it (ModuleNotFoundError: "
                                                         "No module named 'openvino')")
    assert prune([entry]).removed == []
    assert [e.name for e in prune([entry], everything=True).removed] == [entry.name]


def test_openvino_genai_entries_are_kept_while_the_export_python_cannot_be_probed(data_dir, monkeypatch):
    from benchmark_runners.backends import openvino_genai

    monkeypatch.setattr(openvino_genai, "exporter_versions", lambda python: _EXPORTER)
    installed = openvino_genai.installation_identity()
    identity = {"model": "gpt2", "config": {}, "path": None, "weights": "random", **installed}
    key = hashlib.sha256(json.dumps(identity, sort_keys=True, default=str).encode()).hexdigest()[:16]
    entry = openvino_genai.cache_dir() / f"gpt2-{key}"
    entry.mkdir(parents=True)
    (entry / "openvino_model.xml").write_text("<net/>")
    (entry / "devicefit-export.json").write_text(json.dumps({"identity": identity}))
    # The probe timed out on a busy machine (or the venv is being rebuilt): not another exporter.
    monkeypatch.setattr(openvino_genai, "exporter_versions", lambda python: f"{python} did not run (TimeoutExpired: 60 s)")
    [listed] = conversion_entries(["openvino-genai"])
    assert listed.state == "unknown" and "the export python" in listed.reason and "did not run" in listed.reason
    assert prune([listed]).removed == [] and entry.exists()


def test_model_matching_is_exact_for_entries_that_record_no_model(data_dir):
    cache = data_dir / "cache"
    for sub, name in (("onnx", "bert-tiny-0123456789abcdef.onnx"), ("onnx", "bert-tiny-local-x-0123456789abcdef.onnx"),
                      ("openvino", "bert-tiny-fp32_weights-0123456789abcdef.xml"),
                      ("openvino", "bert-tiny-local-fp32_weights-0123456789abcdef.xml"),
                      ("openvino-genai", "org_m-0123456789abcdef"), ("openvino-genai", "org_m-2-0123456789abcdef")):
        (cache / sub).mkdir(parents=True, exist_ok=True)
        (cache / sub / name).mkdir() if sub == "openvino-genai" else (cache / sub / name).write_bytes(b"x")
    entries = conversion_entries()  # all incomplete (no metadata): no model recorded, only their names
    assert {e.model for e in entries} == {None}
    assert sorted(e.name for e in cache_prune.chosen(entries, model="bert-tiny")) == [
        "bert-tiny-0123456789abcdef", "bert-tiny-fp32_weights-0123456789abcdef"]
    assert [e.name for e in cache_prune.chosen(entries, model="org/m")] == ["org_m-0123456789abcdef"]


def test_files_a_converter_does_not_write_are_never_part_of_an_entry(data_dir, tiny_models):
    onnx = _export_onnx(tiny_models["text"])
    cache = onnx.onnx.parent
    stem = onnx.onnx.name[: -len(".onnx")]
    mine = cache / f"{stem}-backup"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")  # a user's directory named after the entry
    (cache / f"{stem}.onnx.sha256").write_text("mine")  # and a file
    (cache / ".staging-note").write_text("mine")  # a file where staging makes directories
    os.symlink(mine, cache / ".staging-link")
    entries = _by_name(conversion_entries())
    assert entries[stem].state == "current" and all(Path(p).name.startswith(stem + ".") for p in entries[stem].paths)
    assert {entries[n].state for n in (mine.name, f"{stem}.onnx.sha256", ".staging-note", ".staging-link")} == {"unrecognised"}
    prune(list(entries.values()), everything=True)
    assert sorted(p.name for p in cache.iterdir()) == sorted([".staging-link", ".staging-note", mine.name, f"{stem}.onnx.sha256"])
    assert (mine / "notes.txt").read_text() == "mine"


def test_a_derived_cache_directory_shared_with_others_loses_only_derived_entries(data_dir, tmp_path):
    home = tmp_path / "derived"  # DEVICEFIT_CACHE_DIR pointed at a directory other tools use too
    (home / "trace").mkdir(parents=True)
    (home / "trace" / ("c" * 24 + ".json")).write_text("{}")
    (home / "trace" / "README.json").write_text("mine")
    (home / "other-tool").mkdir()
    (home / "other-tool" / "settings.json").write_text("mine")
    old = time.time() - 10 * 86400
    for path in (home / "trace" / "README.json", home / "other-tool" / "settings.json"):
        os.utime(path, (old, old))
    [entry] = all_entries()
    assert entry.name == "trace" and entry.files == 1
    assert prune(all_entries(), unused_days=5, dry_run=True).removed == []
    prune(all_entries(), everything=True)
    assert sorted(str(p.relative_to(home)) for p in home.rglob("*")) == ["other-tool", "other-tool/settings.json", "trace",
                                                                           "trace/README.json"]


def test_a_dry_run_by_age_counts_only_the_derived_entries_that_would_go(data_dir, tmp_path):
    kind = tmp_path / "derived" / "flops"
    kind.mkdir(parents=True)
    for i, age_days in enumerate((10, 0, 0)):
        path = kind / (f"{i}" * 24 + ".json")
        path.write_bytes(b"x" * 8192)
        os.utime(path, (time.time() - age_days * 86400,) * 2)
    dry = prune(all_entries(), unused_days=5, dry_run=True)
    done = prune(all_entries(), unused_days=5)
    assert dry.freed_bytes == done.freed_bytes > 0 and len(list(kind.iterdir())) == 2


def test_a_model_name_with_a_dot_keeps_its_key_in_every_onnx_file_name(data_dir, tiny_models, tmp_path):
    from benchmark_runners.browser import export
    from models.resolve import resolve_model

    model = shutil.copytree(tiny_models["text"], tmp_path / "tiny-bert.v2")
    spec = resolve_model(str(model))
    fp32 = export.export(spec, _config(model, device="wasm", backend="browser", seq_length=16))
    assert fp32.onnx.name.startswith(f"{spec.name}-") and fp32.onnx.name.endswith(".onnx")
    other = export.export(spec, _config(model, device="wasm", backend="browser", seq_length=32))
    assert other.onnx != fp32.onnx and other.source == "exported from torch"  # another shape: another file
    int8 = export.export(spec, _config(model, device="wasm", backend="browser", seq_length=16, precision="int8"))
    assert int8.onnx != fp32.onnx and int8.onnx.name.endswith("-int8-dynamic-matmul.onnx")
    assert {(e.state, e.model) for e in conversion_entries(["onnx"])} == {("current", spec.name)}


def test_an_incomplete_entry_that_its_writer_finishes_before_the_prune_removes_it_is_kept(data_dir, tiny_models):
    exported = _export_onnx(tiny_models["text"])
    meta = exported.onnx.with_name(exported.onnx.name[: -len(".onnx")] + ".json")
    document = meta.read_bytes()
    meta.unlink()  # listed between a writer's moves out of staging: its metadata (moved last) not there yet
    entries = conversion_entries()
    assert [e.state for e in entries] == ["incomplete"]
    meta.write_bytes(document)  # the writer's last move; its process reads the entry now
    report = prune(entries)
    assert report.removed == [] and exported.onnx.exists() and _export_onnx(tiny_models["text"]).source == "disk cache"
    reference = exported.onnx.with_name(exported.onnx.name[: -len(".onnx")] + ".reference.npy")
    reference.unlink()  # whole metadata, a needed file gone: still incomplete when the prune comes, so it goes
    assert [e.name for e in prune(conversion_entries()).removed] == [meta.stem] and not exported.onnx.exists()


def test_an_onnx_entry_made_with_another_onnxruntime_is_stale(data_dir, tiny_models):
    """onnxruntime's tools make the int8 and fp16 files: an upgrade must not leave them read."""
    exported = _export_onnx(tiny_models["text"])
    old = _as_if_made_with(exported.onnx.with_suffix(".json"), onnxruntime="1.0.0")
    entries = _by_name(conversion_entries())
    assert entries[old.stem].state == "stale" and entries[old.stem].reason.startswith("made with onnxruntime '1.0.0' (here: '")
    assert entries[exported.onnx.stem].state == "current"
