"""Landing files through storage both sides reach (DEVICEFIT_LANDING_URL): what a worker writes
reaches the writer's load whole, once; a bad file is reported once; a share that cannot be used
is an error naming it."""
import json

import pytest

from benchmark_runners.records import BenchmarkConfig
from devicefit import store
from devicefit.landing import load_landing_files, write_landing
from devicefit.landing_share import SHARE_ENV, LandingShareError, pull, push
from devicefit.paths import DataPaths
from devicefit.results_io import results_document
from tests.fleet.test_device_profiles import _row
from tests.fleet.test_partitions import HARDWARE, _device_record


def test_a_workers_landing_file_and_device_record_reach_the_writer_once(tmp_path, monkeypatch):
    share = tmp_path / "share"
    monkeypatch.setenv(SHARE_ENV, share.as_uri())
    worker, writer = DataPaths(tmp_path / "worker"), DataPaths(tmp_path / "writer")
    # The worker's side: its landing file and its device record, pushed as they are written.
    write_landing(worker.raw, "partition:cpu-abc+t1|bert-tiny",
                  results_document("r1", [_row(BenchmarkConfig(model="bert-tiny", threads=1), 9.0)], HARDWARE))
    (worker.raw / "devices").mkdir(parents=True)
    record = worker.raw / "devices" / "cuda-dddddddddddd.json"
    record.write_text(json.dumps(_device_record()))
    push(record, worker.raw)
    assert sorted(p.name for p in (share / "raw").rglob("*.json")) == ["cuda-dddddddddddd.json", "partition__cpu-abc__t1__bert-tiny.json"]
    assert not [p for p in share.rglob(".*")]  # no temporary left behind
    # The writer's side: one load pulls both, registers the device and stores the rows.
    report = load_landing_files(writer.database, writer.raw)
    assert sorted(report.pulled) == ["devices/cuda-dddddddddddd.json", "partition__cpu-abc__t1__bert-tiny.json"]
    assert report.rows_loaded == 1 and report.devices_registered == ["cuda-dddddddddddd"]
    again = load_landing_files(writer.database, writer.raw)
    assert again.pulled == [] and again.loaded == []  # the same bytes: nothing pulled or stored twice
    with store.opened(writer.database, read_only=True) as con:
        assert con.execute("SELECT device_id, count(*) FROM measurements GROUP BY ALL").fetchall() == [("cpu-abc+t1", 1)]


def test_a_bad_file_on_the_share_is_quarantined_once(tmp_path, monkeypatch):
    share = tmp_path / "share"
    monkeypatch.setenv(SHARE_ENV, share.as_uri())
    (share / "raw").mkdir(parents=True)
    (share / "raw" / "partition__x__y.json").write_text('{"format": "devicefit.benchmark_results/1", "results": [')
    writer = DataPaths(tmp_path / "writer")
    first = load_landing_files(writer.database, writer.raw)
    assert [name for name, _ in first.quarantined] == ["partition__x__y.json"]
    second = load_landing_files(writer.database, writer.raw)
    assert second.quarantined == [] and second.pulled == []
    assert pull(writer.raw).still_quarantined == ["partition__x__y.json"]
    # Replaced on the share by another bad version: quarantined once beside the first (numbered),
    # then held there too, not pulled and quarantined again at every load.
    (share / "raw" / "partition__x__y.json").write_text('{"format": "devicefit.benchmark_results/1", "results": [{')
    third = load_landing_files(writer.database, writer.raw)
    assert [name for name, _ in third.quarantined] == ["partition__x__y.json"]
    fourth = load_landing_files(writer.database, writer.raw)
    assert fourth.quarantined == [] and fourth.pulled == []
    assert sorted(p.name for p in (writer.raw / "quarantine").glob("*.json")) == ["partition__x__y.1.json", "partition__x__y.json"]


def test_a_share_that_cannot_be_used_is_an_error_naming_it(tmp_path):
    with pytest.raises(LandingShareError, match="nosuch://x.* is not a location fsspec can open"):
        pull(tmp_path, "nosuch://x")
    blocker = tmp_path / "file"
    blocker.write_text("")
    local = tmp_path / "raw" / "a.json"
    local.parent.mkdir()
    local.write_text("{}")
    with pytest.raises(LandingShareError, match="cannot write a.json to the landing share"):
        push(local, tmp_path / "raw", (blocker / "sub").as_uri())  # a path under a file: not writable


def test_without_a_share_nothing_is_pushed_or_pulled(tmp_path, monkeypatch):
    monkeypatch.delenv(SHARE_ENV, raising=False)
    local = tmp_path / "raw" / "a.json"
    local.parent.mkdir()
    local.write_text("{}")
    assert push(local, tmp_path / "raw") is None and pull(tmp_path / "raw").pulled == []


def test_a_file_of_gigabytes_on_the_share_is_never_read_or_pulled(tmp_path, monkeypatch):
    """The pull reads each file whole: a multi-GB file on the share would take the writer's memory."""
    from devicefit.landing import MAX_LANDING_BYTES

    share = tmp_path / "share"
    monkeypatch.setenv(SHARE_ENV, share.as_uri())
    (share / "raw").mkdir(parents=True)
    with open(share / "raw" / "partition__x__huge.json", "wb") as fh:
        fh.truncate(MAX_LANDING_BYTES + 1)  # sparse: no disk used
    writer = DataPaths(tmp_path / "writer")
    report = load_landing_files(writer.database, writer.raw)
    reasons = dict(report.quarantined)
    assert list(reasons) == ["share:partition__x__huge.json"] and "left on the share, not read" in reasons["share:partition__x__huge.json"]
    assert report.pulled == [] and not (writer.raw / "partition__x__huge.json").exists()


def test_a_newer_local_landing_file_is_not_replaced_by_the_shares_older_copy(tmp_path, monkeypatch):
    """A partition measured again while the share could not be written has its newer run only
    locally; the next load pulled the share's older copy over it, and the store went back to
    the old run (found by a fault hunt, 2026-11-30). A share copy written later still wins."""
    share = tmp_path / "share"
    monkeypatch.setenv(SHARE_ENV, share.as_uri())
    writer = DataPaths(tmp_path / "writer")
    key = "partition:cpu-abc+t1|bert-tiny"

    def document(run_id: str, p50: float, written_at: str) -> dict:
        rows = [_row(BenchmarkConfig(model="bert-tiny", threads=1), p50)]
        return {**results_document(run_id, rows, HARDWARE), "written_at": written_at}

    def stored_p50() -> list:
        with store.opened(writer.database, read_only=True) as con:
            return con.execute("SELECT p50_ms FROM measurements").fetchall()

    write_landing(writer.raw, key, document("r1", 9.0, "2026-11-30T07:40:10+00:00"))  # on the share too
    load_landing_files(writer.database, writer.raw)
    monkeypatch.delenv(SHARE_ENV)  # the share cannot be written: the new run lands locally only
    write_landing(writer.raw, key, document("r2", 12.0, "2026-11-30T08:34:27+00:00"))
    monkeypatch.setenv(SHARE_ENV, share.as_uri())
    report = load_landing_files(writer.database, writer.raw)
    assert report.pulled == [] and report.kept_newer == ["partition__cpu-abc__t1__bert-tiny.json"]
    assert stored_p50() == [(12.0,)]
    shared = json.loads((share / "raw" / "partition__cpu-abc__t1__bert-tiny.json").read_text())
    assert shared["run_id"] == "r2"  # the share got the newer run back: a load elsewhere takes it too
    assert json.loads((writer.raw / "partition__cpu-abc__t1__bert-tiny.json").read_text())["written_at"].startswith("2026-11-30T08:34")
    # Another worker pushes a run written after ours: the share's copy is the newer one and is pulled.
    worker = DataPaths(tmp_path / "worker")
    write_landing(worker.raw, key, document("r3", 15.0, "2026-11-30T09:00:00+00:00"))
    assert load_landing_files(writer.database, writer.raw).pulled == ["partition__cpu-abc__t1__bert-tiny.json"]
    assert stored_p50() == [(15.0,)]


def _two_runs_elsewhere(tmp_path):
    """A directory of two results files from another machine, as `devicefit ingest DIR` takes it."""
    source = tmp_path / "elsewhere"
    source.mkdir()
    for run_id, p50 in (("r1", 9.0), ("r2", 12.0)):
        document = results_document(run_id, [_row(BenchmarkConfig(model="bert-tiny", threads=1), p50)], HARDWARE)
        (source / f"{run_id}.json").write_text(json.dumps(document))
    return source


def test_an_ingest_whose_share_cannot_take_its_files_says_what_was_landed_and_where(tmp_path, monkeypatch):
    """`devicefit ingest DIR` landed file by file and pushed each as it went: a share that could
    not be written failed the command with the share's error alone, after the first file was
    landed, and the next load stored it (found by a fault hunt, 2026-11-30). Every file is now
    landed first, and the error says so and which reached the share; ingesting again pushes them."""
    from devicefit import landing_share
    from devicefit.ingest import ingest_path

    share = tmp_path / "share"
    monkeypatch.setenv(SHARE_ENV, share.as_uri())
    source = _two_runs_elsewhere(tmp_path)
    raw = DataPaths(tmp_path / "writer").raw
    real_push, calls = landing_share.push, []

    def second_push_fails(local, raw_dir, url=None):
        calls.append(local.name)
        if len(calls) == 2:
            raise LandingShareError("cannot write it to the landing share (the disk is full)")
        return real_push(local, raw_dir, url)

    monkeypatch.setattr(landing_share, "push", second_push_fails)
    with pytest.raises(LandingShareError) as failure:
        ingest_path(source, raw)
    landed = sorted(p.name for p in raw.glob("ingest__*.json"))
    message = str(failure.value)
    assert len(landed) == 2 and f"all 2 file(s) are landed in {raw}" in message
    assert f"on the share: {calls[0]}; not on it: {calls[1]}" in message
    assert sorted(p.name for p in (share / "raw").glob("*.json")) == [calls[0]]
    monkeypatch.setattr(landing_share, "push", real_push)
    assert [r.rows for r in ingest_path(source, raw)] == [1, 1]  # again, once the share takes them
    assert sorted(p.name for p in (share / "raw").glob("*.json")) == landed


def test_an_ingest_that_fails_halfway_through_landing_leaves_none_of_its_files(tmp_path, monkeypatch):
    """Landing the files of a directory locally is all or none: the second failing (a full disk,
    Ctrl-C) removes the first, which the next load would have stored."""
    import devicefit.ingest as ingest

    source = _two_runs_elsewhere(tmp_path)
    raw = DataPaths(tmp_path / "writer").raw
    real, calls = ingest.write_landing, []

    def second_fails(*args, **kwargs):
        calls.append(args[1])
        if len(calls) == 2:
            raise OSError(28, "No space left on device")
        return real(*args, **kwargs)

    monkeypatch.setattr(ingest, "write_landing", second_fails)
    with pytest.raises(OSError, match="No space left"):
        ingest.ingest_path(source, raw)
    assert list(raw.glob("*.json")) == []
