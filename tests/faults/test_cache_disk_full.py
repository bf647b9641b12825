"""A conversion onto a disk that cannot hold it (benchmark_runners.cache_files): the row fails
saying the disk is full, nothing half-written stays behind to hold the space the next config
needs, and the next config runs. A conversion killed mid-write leaves a staging directory that the
next conversion on this host sweeps. Real full disks: a small tmpfs (tests/faults/conftest.py)."""
import fcntl
import json
import os
import subprocess
import sys
import time

import pytest

from benchmark_runners import cache_files
from benchmark_runners.cache_files import NotEnoughDiskSpace


def _fill_leaving(disk, free_bytes: int):
    """Fill `disk` with one file (unbuffered, up to ENOSPC), then give back `free_bytes`."""
    import errno

    filler = disk / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT)
    try:
        while True:
            os.write(fd, b"\0" * 4096)
    except OSError as exc:
        assert exc.errno == errno.ENOSPC
    finally:
        os.close(fd)
    os.truncate(filler, filler.stat().st_size - free_bytes)
    return filler


def _openvino_config(model, **kw):
    from benchmark_runners.records import BenchmarkConfig
    from tests.conftest import FAST_POLICY

    return BenchmarkConfig(model=str(model), **{"device": "openvino:CPU", "backend": "openvino", "policy": FAST_POLICY, **kw})


def test_an_openvino_conversion_the_disk_cannot_hold_is_a_failed_row_naming_it_and_leaves_nothing(small_disk, tiny_models, monkeypatch):
    pytest.importorskip("openvino")
    from benchmark_runners.backends import openvino_backend
    from benchmark_runners.measure import ConfigMeasurer

    monkeypatch.setattr(openvino_backend, "cache_dir", lambda: small_disk)
    measurer = ConfigMeasurer("test-run", {"suite": "pytest"}, {"openvino:CPU": {"name": "test cpu", "fingerprint": None},
                                                                  "cpu": {"name": "test cpu", "fingerprint": None}})
    row = measurer.run(_openvino_config("bert-tiny", batch_size=1))  # a 17 MB IR, on a 2 MiB disk
    assert row.status == "failed" and row.reason_code == "exception"
    assert "NotEnoughDiskSpace" in row.error and "not enough disk space" in row.error and str(small_disk) in row.error
    assert "MiB are free" in row.error and "nothing was written" in row.error
    assert list(small_disk.iterdir()) == []
    after = measurer.run(_openvino_config(tiny_models["text"], batch_size=1, device="cpu", backend="torch"))
    assert after.status == "ok", after.error


def test_a_disk_that_fills_during_the_write_removes_the_partial_files_and_says_so(small_disk, tiny_models, monkeypatch):
    """The estimate passed (as when another process fills the disk meanwhile), the write did not."""
    pytest.importorskip("openvino")
    from benchmark_runners.backends import openvino_backend
    from benchmark_runners.measure import ConfigMeasurer

    monkeypatch.setattr(openvino_backend, "cache_dir", lambda: small_disk)
    monkeypatch.setattr(openvino_backend, "require_free_space", lambda *a: None)
    (small_disk / "other.bin").write_bytes(b"\0" * 10)  # what was there before stays
    filler = _fill_leaving(small_disk, 16 * 1024)  # room for a little, not an IR
    row = ConfigMeasurer("test-run", {}, {"openvino:CPU": {"name": "test cpu", "fingerprint": None}}).run(
        _openvino_config(tiny_models["text"], batch_size=1))
    assert row.status == "failed"
    assert "NotEnoughDiskSpace" in row.error and "filled while writing" in row.error and "partial files were removed" in row.error
    assert sorted(p.name for p in small_disk.iterdir()) == ["filler", "other.bin"]

    filler.unlink()  # space freed: the same config converts, is cached whole and measures
    again = ConfigMeasurer("test-run", {}, {"openvino:CPU": {"name": "test cpu", "fingerprint": None}}).run(
        _openvino_config(tiny_models["text"], batch_size=1))
    kept = sorted(p.suffix for p in small_disk.iterdir() if p.name != "other.bin")
    assert kept == [".bin", ".json", ".npy", ".xml"] and not [p for p in small_disk.iterdir() if p.name.startswith(".")]
    assert again.status == "ok", again.error


def test_an_onnx_export_the_disk_cannot_hold_is_refused_before_writing(small_disk, monkeypatch):
    pytest.importorskip("onnx")
    from benchmark_runners.browser import export
    from benchmark_runners.records import BenchmarkConfig
    from models.catalog import load_catalog

    monkeypatch.setattr(export, "cache_dir", lambda: small_disk)
    with pytest.raises(NotEnoughDiskSpace, match=r"bert-tiny's fp32 ONNX export: it needs about \d+ MiB"):
        export.export(load_catalog()["bert-tiny"], BenchmarkConfig(model="bert-tiny", device="wasm", backend="browser"))
    assert list(small_disk.iterdir()) == []


def test_a_whole_onnx_export_is_reused_and_one_with_unreadable_metadata_is_made_again(tmp_path, monkeypatch):
    pytest.importorskip("onnx")
    from benchmark_runners.browser import export
    from benchmark_runners.records import BenchmarkConfig
    from models.catalog import load_catalog

    monkeypatch.setattr(export, "cache_dir", lambda: tmp_path)
    config = BenchmarkConfig(model="bert-tiny", device="wasm", backend="browser")
    first = export.export(load_catalog()["bert-tiny"], config)
    assert first.source == "exported from torch" and first.onnx.exists() and first.reference.exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no staging left
    assert export.export(load_catalog()["bert-tiny"], config).source == "disk cache"
    first.onnx.with_suffix(".json").write_text('{"weights_recipe": "seeded", "adapt')  # a truncated metadata file
    again = export.export(load_catalog()["bert-tiny"], config)
    assert again.source == "exported from torch"
    assert json.loads(first.onnx.with_suffix(".json").read_text())["adaptations"] == first.adaptations


def _staging_dir(root, name, locked_by=None, age_s=0.0):
    stage = root / f"{cache_files.STAGING_PREFIX}{name}"
    stage.mkdir()
    (stage / "model.onnx").write_bytes(b"\0" * 1000)
    if locked_by is not None:
        lock = stage / cache_files.WRITER_LOCK
        lock.touch()
        if locked_by == "live":
            fd = os.open(lock, os.O_RDWR)
            fcntl.flock(fd, fcntl.LOCK_EX)
            return stage, fd
    if age_s:
        os.utime(stage, (time.time() - age_s, time.time() - age_s))
    return stage, None


def test_staging_whose_writer_is_gone_is_swept_and_a_live_writers_kept(tmp_path):
    """A writer holds a lock on its staging directory: the kernel frees it when the writer dies,
    whatever host name or PID namespace it had (a PID test swept a live writer's files from a
    container that shared the host name but not the PIDs). A directory with no lock is left a day."""
    killed, _ = _staging_dir(tmp_path, "killed", locked_by="dead")
    live, held = _staging_dir(tmp_path, "live", locked_by="live")
    young, _ = _staging_dir(tmp_path, "young")
    old, _ = _staging_dir(tmp_path, "old", age_s=cache_files.UNLOCKED_AGE_S + 60)
    old_tmp, new_tmp, whole = tmp_path / ".bert-tiny-0123.onnx.tmp", tmp_path / ".gpt2-4567.onnx.tmp", tmp_path / "bert-tiny-0123.onnx"
    for f in (old_tmp, new_tmp, whole):
        f.write_bytes(b"\0")
    hour_ago = time.time() - cache_files.LEGACY_AGE_S - 60
    os.utime(old_tmp, (hour_ago, hour_ago))
    os.utime(whole, (hour_ago, hour_ago))
    try:
        removed = cache_files.sweep_abandoned(tmp_path)
        assert sorted(removed) == sorted([killed.name, old.name, old_tmp.name])
        assert live.exists() and (live / "model.onnx").exists() and young.exists() and new_tmp.exists() and whole.exists()
    finally:
        os.close(held)
    assert cache_files.sweep_abandoned(tmp_path) == [live.name]  # its writer gone now


def test_a_writer_in_another_process_keeps_its_staging_until_it_dies(tmp_path):
    script = ("import sys, time\nfrom pathlib import Path\nfrom benchmark_runners.cache_files import staging\n"
              "with staging(Path(sys.argv[1]), 'a test') as stage:\n"
              "    (stage / 'part').write_bytes(b'x'); print(stage.name, flush=True); time.sleep(60)\n")
    writer = subprocess.Popen([sys.executable, "-c", script, str(tmp_path)], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": os.getcwd()})
    try:
        name = writer.stdout.readline().strip()
        assert name.startswith(cache_files.STAGING_PREFIX)
        assert cache_files.sweep_abandoned(tmp_path) == [] and (tmp_path / name / "part").exists()
    finally:
        writer.kill()
        writer.wait()
    assert cache_files.sweep_abandoned(tmp_path) == [name] and not (tmp_path / name).exists()


def test_a_failure_inside_staging_removes_it_and_a_full_disk_is_named(tmp_path):
    import errno

    with pytest.raises(ValueError):
        with cache_files.staging(tmp_path, "a test") as stage:
            (stage / "part").write_bytes(b"x")
            raise ValueError("boom")
    with pytest.raises(NotEnoughDiskSpace, match="filled while writing a test's file"):
        with cache_files.staging(tmp_path, "a test's file") as stage:
            raise RuntimeError("onnx writer: No space left on device")  # a C++ writer's words
    with pytest.raises(NotEnoughDiskSpace):
        with cache_files.staging(tmp_path, "x"):
            raise OSError(errno.ENOSPC, "No space left on device")
    assert list(tmp_path.iterdir()) == []


def test_a_full_disk_elsewhere_is_not_blamed_on_the_caches(tmp_path):
    """The openvino-genai export writes its Hugging Face copy to the temporary directory, which
    may be a small tmpfs: its ENOSPC is named as another disk's, with the path it names."""
    import errno

    with pytest.raises(NotEnoughDiskSpace) as caught:
        with cache_files.staging(tmp_path, "gpt2's stateful IR"):
            raise OSError(errno.ENOSPC, "No space left on device", "/tmp/devicefit-genai-x/hf/model.safetensors")
    message = str(caught.value)
    assert message.startswith("a disk filled while writing gpt2's stateful IR, not the one holding") and "hf/model.safetensors" in message


def test_an_onnx_export_that_fills_the_disk_is_named_and_leaves_nothing(small_disk, monkeypatch):
    pytest.importorskip("onnx")
    from benchmark_runners.browser import export
    from benchmark_runners.records import BenchmarkConfig
    from models.catalog import load_catalog

    monkeypatch.setattr(export, "cache_dir", lambda: small_disk)
    monkeypatch.setattr(export, "require_free_space", lambda *a: None)  # as when another process fills the disk meanwhile
    with pytest.raises(NotEnoughDiskSpace, match="filled while writing bert-tiny's fp32 ONNX export; the partial files were removed"):
        export.export(load_catalog()["bert-tiny"], BenchmarkConfig(model="bert-tiny", device="wasm", backend="browser"))
    assert list(small_disk.iterdir()) == []


def test_a_model_past_one_onnx_files_2_gib_is_refused_before_export(tmp_path, monkeypatch):
    """Past protobuf's 2 GiB, torch's exporter writes each weight to a file of its own beside the
    graph; staged and moved file by file, those weights were deleted with the staging and the cache
    held a 40 KB graph without them. Such a model is refused, saying why (the limit lowered here)."""
    pytest.importorskip("onnx")
    from benchmark_runners.backends.browser_backend import BrowserBackend
    from benchmark_runners.browser import export
    from benchmark_runners.records import BenchmarkConfig
    from models.catalog import load_catalog

    monkeypatch.setattr(export, "cache_dir", lambda: tmp_path)
    monkeypatch.setattr(export, "ONNX_FILE_LIMIT_BYTES", 8 * 2**20)  # bert-tiny's 17 MB of fp32 is past it
    with pytest.raises(ValueError, match=r"bert-tiny's fp32 weights are 0.0 GiB, past the 2 GiB one ONNX file holds"):
        export.export(load_catalog()["bert-tiny"], BenchmarkConfig(model="bert-tiny", device="wasm", backend="browser"))
    assert list(tmp_path.iterdir()) == []
    monkeypatch.setattr(export, "ONNX_FILE_LIMIT_BYTES", 2**31 - 2**20)
    assert export.too_large_for_one_file("x", 2**31) and export.too_large_for_one_file("x", 2**30) is None
    monkeypatch.setattr("benchmark_runners.hardware.detect_hardware", lambda probe=False: type(
        "Inventory", (), {"platforms": {"wasm": type("Platform", (), {"available": True, "reason": None, "devices": []})()}})())
    falcon = "falcon-7b"
    reason = BrowserBackend().device_reason(load_catalog()[falcon], BenchmarkConfig(model=falcon, device="wasm", backend="browser"))
    assert reason and "past the 2 GiB one ONNX file holds" in reason


def test_an_unreadable_fp16_sidecar_is_converted_again(tmp_path, monkeypatch):
    pytest.importorskip("onnxruntime.transformers.float16")
    from benchmark_runners.browser import export
    from benchmark_runners.records import BenchmarkConfig
    from models.catalog import load_catalog

    monkeypatch.setattr(export, "cache_dir", lambda: tmp_path)
    config = BenchmarkConfig(model="bert-tiny", device="webgpu", backend="browser", precision="fp16")
    first = export.export(load_catalog()["bert-tiny"], config)
    sidecar = first.onnx.with_suffix(".json")
    sidecar.write_text('{"torch_own_devia')  # killed mid-write by an earlier version
    again = export.export(load_catalog()["bert-tiny"], config)
    assert again.torch_own_deviation == first.torch_own_deviation
    assert json.loads(sidecar.read_text())["torch_own_deviation"] == first.torch_own_deviation
