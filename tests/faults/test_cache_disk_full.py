"""A conversion onto a disk that cannot hold it (benchmark_runners.cache_files): the row fails
saying the disk is full, nothing half-written stays behind to hold the space the next config
needs, and the next config runs. A conversion killed mid-write leaves a staging directory that the
next conversion on this host sweeps. Real full disks: a small tmpfs (tests/faults/conftest.py)."""
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

    monkeypatch.setattr(openvino_backend, "_cache_dir", lambda: small_disk)
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

    monkeypatch.setattr(openvino_backend, "_cache_dir", lambda: small_disk)
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

    monkeypatch.setattr(export, "_cache_dir", lambda: small_disk)
    with pytest.raises(NotEnoughDiskSpace, match=r"bert-tiny's fp32 ONNX export: it needs about \d+ MiB"):
        export.export(load_catalog()["bert-tiny"], BenchmarkConfig(model="bert-tiny", device="wasm", backend="browser"))
    assert list(small_disk.iterdir()) == []


def test_a_whole_onnx_export_is_reused_and_one_with_unreadable_metadata_is_made_again(tmp_path, monkeypatch):
    pytest.importorskip("onnx")
    from benchmark_runners.browser import export
    from benchmark_runners.records import BenchmarkConfig
    from models.catalog import load_catalog

    monkeypatch.setattr(export, "_cache_dir", lambda: tmp_path)
    config = BenchmarkConfig(model="bert-tiny", device="wasm", backend="browser")
    first = export.export(load_catalog()["bert-tiny"], config)
    assert first.source == "exported from torch" and first.onnx.exists() and first.reference.exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no staging left
    assert export.export(load_catalog()["bert-tiny"], config).source == "disk cache"
    first.onnx.with_suffix(".json").write_text('{"weights_recipe": "seeded", "adapt')  # a truncated metadata file
    again = export.export(load_catalog()["bert-tiny"], config)
    assert again.source == "exported from torch"
    assert json.loads(first.onnx.with_suffix(".json").read_text())["adaptations"] == first.adaptations


def test_staging_of_a_killed_process_is_swept_and_a_live_ones_kept(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    host = cache_files._host()
    abandoned = tmp_path / f".staging-{host}-{dead.pid}-abc123"
    live = tmp_path / f".staging-{host}-{os.getpid()}-def456"
    elsewhere = tmp_path / f".staging-otherhost-{dead.pid}-ghi789"  # a shared data directory: another host's writer
    for d in (abandoned, live, elsewhere):
        d.mkdir()
        (d / "model.onnx").write_bytes(b"\0" * 1000)
    old_tmp, new_tmp, whole = tmp_path / ".bert-tiny-0123.onnx.tmp", tmp_path / ".gpt2-4567.onnx.tmp", tmp_path / "bert-tiny-0123.onnx"
    for f in (old_tmp, new_tmp, whole):
        f.write_bytes(b"\0")
    hour_ago = time.time() - cache_files.LEGACY_AGE_S - 60
    os.utime(old_tmp, (hour_ago, hour_ago))
    os.utime(whole, (hour_ago, hour_ago))

    removed = cache_files.sweep_abandoned(tmp_path)
    assert sorted(removed) == sorted([abandoned.name, old_tmp.name])
    assert not abandoned.exists() and not old_tmp.exists()
    assert live.exists() and elsewhere.exists() and new_tmp.exists() and whole.exists()


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


def test_an_onnx_export_that_fills_the_disk_is_named_and_leaves_nothing(small_disk, monkeypatch):
    pytest.importorskip("onnx")
    from benchmark_runners.browser import export
    from benchmark_runners.records import BenchmarkConfig
    from models.catalog import load_catalog

    monkeypatch.setattr(export, "_cache_dir", lambda: small_disk)
    monkeypatch.setattr(export, "require_free_space", lambda *a: None)  # as when another process fills the disk meanwhile
    with pytest.raises(NotEnoughDiskSpace, match="filled while writing bert-tiny's fp32 ONNX export; the partial files were removed"):
        export.export(load_catalog()["bert-tiny"], BenchmarkConfig(model="bert-tiny", device="wasm", backend="browser"))
    assert list(small_disk.iterdir()) == []
