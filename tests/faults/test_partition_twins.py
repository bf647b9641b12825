"""A partition's own landing file and an ingested copy of one of its runs from the same machine
hold one source of measurements: the store keeps the later run, whichever way round they came.

Found by a fault hunt (2026-11-30): with a copy of run 31 ingested, the partition measured again
here (run 32) was stored beside it, and every aggregate of bert-tiny on this CPU became the median
of two runs. Real landing files of make runs 31, 32 and 33 on the AVX2 EPYC (same machine)."""
import json
from pathlib import Path

import pytest

from devicefit import store
from devicefit.ingest import ingest_path
from devicefit.landing import SUPERSEDED_DIR, load_landing_files, write_landing
from devicefit.paths import DataPaths

DATASETS = Path(__file__).resolve().parents[2] / "benchmarks" / "datasets"
NAME = "partition__cpu-245a6e58dfb9__bert-tiny.json"
KEY = "partition:cpu-245a6e58dfb9|bert-tiny"


def _dataset(run: int | str) -> Path:
    return DATASETS / (f"epyc-2c-run{run}" if isinstance(run, int) else run) / NAME


def _document(run: int | str) -> dict:
    return json.loads(_dataset(run).read_text())


def _ingest(tmp_path, run: int | str, paths: DataPaths):
    folder = tmp_path / f"copy-{run}"
    folder.mkdir(exist_ok=True)
    (folder / NAME).write_bytes(_dataset(run).read_bytes())
    [landed] = ingest_path(folder, paths.raw)
    return landed


def _measured_here(paths: DataPaths, run: int | str, share: bool = False) -> None:
    """The partition's own file, as its materialization on this machine writes it."""
    write_landing(paths.raw, KEY, _document(run), share=share)


def _stored_runs(paths: DataPaths) -> list[str]:
    con = store.connect(paths.database, read_only=True)
    try:
        return [r for (r,) in con.execute("SELECT DISTINCT run_id FROM measurements ORDER BY run_id").fetchall()]
    finally:
        con.close()


def _rebuilt(paths: DataPaths) -> list[str]:
    """The runs a store rebuilt from raw/ alone holds (the database deleted, every file loaded again)."""
    paths.database.unlink()
    load_landing_files(paths.database, paths.raw)
    return _stored_runs(paths)


def test_the_partition_measured_again_after_an_ingested_copy_replaces_it(tmp_path):
    paths = DataPaths(tmp_path / "data")
    ingested = _ingest(tmp_path, 31, paths)
    load_landing_files(paths.database, paths.raw)
    _measured_here(paths, 32)
    report = load_landing_files(paths.database, paths.raw)
    assert _stored_runs(paths) == [_document(32)["run_id"]]
    assert report.superseded == [(ingested.source_key, KEY)]
    assert (paths.raw / SUPERSEDED_DIR / ingested.landing_path.name).is_file() and not ingested.landing_path.exists()
    (line,) = report.superseded_lines()
    assert line.startswith(f"{ingested.source_key}: replaced by {KEY}, a later run") and "raw/superseded/" in line
    assert load_landing_files(paths.database, paths.raw).loaded == []
    assert _rebuilt(paths) == [_document(32)["run_id"]]


@pytest.mark.parametrize("here, ingested_run", [(31, 32), (32, 31)])
def test_an_ingested_run_beside_the_partitions_own_keeps_the_later_of_the_two(tmp_path, here, ingested_run):
    """The partition's own run 31 and a copy of run 32 ingested: the copy replaces it (its file
    retired); its own run 32 and a copy of run 31: the copy is not stored (its file retired)."""
    paths = DataPaths(tmp_path / "data")
    _measured_here(paths, here)
    load_landing_files(paths.database, paths.raw)
    ingested = _ingest(tmp_path, ingested_run, paths)
    report = load_landing_files(paths.database, paths.raw)
    assert _stored_runs(paths) == [_document(32)["run_id"]]
    older, newer = (KEY, ingested.source_key) if here < ingested_run else (ingested.source_key, KEY)
    assert report.superseded == [(older, newer)]
    retired = NAME if older == KEY else ingested.landing_path.name
    assert (paths.raw / SUPERSEDED_DIR / retired).is_file() and not (paths.raw / retired).exists()
    assert _rebuilt(paths) == [_document(32)["run_id"]]


def test_a_copy_of_the_same_run_stays_a_duplicate_until_the_partition_runs_again(tmp_path):
    """The ingested copy of the run the partition holds stores nothing (its rows are duplicates);
    when the partition is measured again, the copy's rows are offered again and were stored beside
    the new run: they are the earlier run now, and are not."""
    paths = DataPaths(tmp_path / "data")
    _measured_here(paths, 32)
    load_landing_files(paths.database, paths.raw)
    ingested = _ingest(tmp_path, 32, paths)
    report = load_landing_files(paths.database, paths.raw)
    assert report.loaded == [(ingested.source_key, 0)] and report.superseded == []
    _measured_here(paths, 33)
    report = load_landing_files(paths.database, paths.raw)
    assert _stored_runs(paths) == [_document(33)["run_id"]]
    assert (ingested.source_key, KEY) in report.superseded
    assert _rebuilt(paths) == [_document(33)["run_id"]]


@pytest.mark.parametrize("field, value", [("hostname", "another-vm"), ("fingerprint", "cpu-0123456789ab")])
def test_another_machines_copy_of_the_partition_stays_its_own_source(tmp_path, field, value):
    """Another machine's file of the same partition key (another hostname with the same CPU, or
    another CPU) is a second machine's measurement, not a copy: both are kept."""
    paths = DataPaths(tmp_path / "data")
    _measured_here(paths, 32)
    load_landing_files(paths.database, paths.raw)
    other = _document(33)
    if field == "hostname":
        other["hardware"]["hostname"] = value
    else:
        other["hardware"]["platforms"]["cpu"]["devices"][0]["fingerprint"] = value
    folder = tmp_path / "elsewhere"
    folder.mkdir()
    (folder / NAME).write_text(json.dumps(other))
    ingest_path(folder, paths.raw)
    report = load_landing_files(paths.database, paths.raw)
    assert report.superseded == []
    assert _stored_runs(paths) == sorted([_document(32)["run_id"], _document(33)["run_id"]])


def test_an_earlier_run_is_not_pushed_over_the_shares_later_one(tmp_path, monkeypatch):
    """A host that has not pulled yet ingests run 31 while the share holds run 32 of the same
    partition of the same machine (ingested by another host): the push replaced the share's
    later run, which the writer then stored. Refused before anything lands, naming the share."""
    from devicefit.landing import LandingFileError
    from devicefit.landing_share import SHARE_ENV

    share = tmp_path / "share"
    monkeypatch.setenv(SHARE_ENV, share.as_uri())
    writer = DataPaths(tmp_path / "elsewhere")
    later = _ingest(tmp_path, 32, writer)  # lands it there and pushes it to the share
    shared = share / "raw" / later.landing_path.name
    assert json.loads(shared.read_text())["run_id"] == _document(32)["run_id"]
    paths = DataPaths(tmp_path / "data")
    with pytest.raises(LandingFileError, match=rf"run {_document(31)['run_id']} .* is older than the run {_document(32)['run_id']} .* "
                                               rf"on the landing share .* as raw/{later.landing_path.name}"):
        _ingest(tmp_path, 31, paths)
    assert json.loads(shared.read_text())["run_id"] == _document(32)["run_id"]
    assert not paths.raw.exists() or not list(paths.raw.glob("*.json"))


def test_the_benchmark_results_asset_says_which_run_replaced_which(tmp_path):
    """The pipeline's load says it too: in its log and in the `superseded` metadata."""
    import logging

    import dagster as dg

    from assets.resources import devicefit_resources
    from assets.results import benchmark_results

    paths = DataPaths(tmp_path)
    ingested = _ingest(tmp_path, 31, paths)
    load_landing_files(paths.database, paths.raw)
    _measured_here(paths, 32)
    instance = dg.DagsterInstance.ephemeral()
    result = dg.materialize([benchmark_results], resources=devicefit_resources(str(tmp_path)), instance=instance)
    assert result.success
    (event,) = result.get_asset_materialization_events()
    assert event.materialization.metadata["superseded"].value == [{"source": ingested.source_key, "replaced_by": KEY}]
    infos = [r.user_message for r in instance.all_logs(result.run_id) if r.level == logging.INFO]
    assert any(m.startswith(f"{ingested.source_key}: replaced by {KEY}, a later run") for m in infos)


def test_every_retired_run_is_kept_and_the_share_does_not_bring_one_back(tmp_path, monkeypatch):
    """The partition's own file and its ingested copy are retired under the same two names run
    after run: the second retirement of a name replaced the first (the run was gone from
    raw/superseded/). And with a landing share, the retired file came back from the share at
    every load, to be loaded and retired again, saying so each time (found by review, 2026-11-30)."""
    from devicefit.landing_share import SHARE_ENV

    monkeypatch.setenv(SHARE_ENV, (tmp_path / "share").as_uri())
    paths = DataPaths(tmp_path / "data")
    _measured_here(paths, "epyc-2c-speedref", share=True)
    load_landing_files(paths.database, paths.raw)
    for step in (lambda: _ingest(tmp_path, 31, paths), lambda: _measured_here(paths, 32, share=True), lambda: _ingest(tmp_path, 33, paths)):
        step()
        load_landing_files(paths.database, paths.raw)
    assert _stored_runs(paths) == [_document(33)["run_id"]]
    retired = sorted(json.loads(f.read_text())["run_id"] for f in (paths.raw / SUPERSEDED_DIR).glob("*.json"))
    assert retired == sorted(_document(run)["run_id"] for run in ("epyc-2c-speedref", 31, 32))
    for _ in range(2):
        again = load_landing_files(paths.database, paths.raw)
        assert (again.pulled, again.superseded, again.loaded) == ([], [], [])
    assert _stored_runs(paths) == [_document(33)["run_id"]]
