"""Issue 21 items 2 and 6: a landing file the store cannot hold is quarantined with its reason and
never blocks the files after it; a row is stored once by its natural key (run_id, config_key)
whatever file brought it; the optimum-benchmark importer refuses wrong-typed fields by name."""
import json
import logging
import re

import pytest

from devicefit import store
from devicefit.ingest import ingest_file, ingest_path
from devicefit.landing import LandingFileError, load_landing_files, write_landing
from devicefit.paths import DataPaths
from tests.pipelines.test_ingest import optimum_documents, write_optimum_pair
from tests.pipelines.test_store import _doc, _row


def _count(db, where="TRUE") -> int:
    con = store.connect(db, read_only=True)
    try:
        return con.execute(f"SELECT count(*) FROM measurements WHERE {where}").fetchone()[0]
    finally:
        con.close()


def _write_raw(path, document) -> None:
    """A landing file as anything might write it: no validation on the way."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document))


STORE_REFUSED = {  # each passed the old validate_document and failed the DuckDB insert
    "string load_time_s": ({"load_time_s": "slow"}, "load_time_s"),
    "batch_size past INTEGER": ({"batch_size": 2**31}, "batch_size"),
    "malformed timestamp": ({"timestamp": "2026-11-22 around noon"}, "timestamp"),
    "optimum load latency 'soon'": ({"load_time_s": "soon"}, "load_time_s"),  # what the old importer made of it
}


@pytest.mark.parametrize("case", STORE_REFUSED)
def test_a_row_the_store_cannot_hold_is_quarantined_and_later_files_load(tmp_path, case):
    change, field = STORE_REFUSED[case]
    paths = DataPaths(tmp_path)
    _write_raw(paths.raw / "partition__cpu__a-bad.json",
               {**_doc([{**_row(run_id="bad"), **change}]), "source_key": "partition:cpu|a-bad"})
    write_landing(paths.raw, "partition:cpu|z-good", _doc([_row(run_id="good")]))
    report = load_landing_files(paths.database, paths.raw)
    reasons = dict(report.quarantined)
    assert field in reasons["partition__cpu__a-bad.json"]
    assert (paths.raw / "quarantine" / "partition__cpu__a-bad.json.reason.txt").read_text().strip() == reasons["partition__cpu__a-bad.json"]
    assert report.loaded == [("partition:cpu|z-good", 1)]
    assert _count(paths.database) == 1
    again = load_landing_files(paths.database, paths.raw)  # nothing is left to block a later load
    assert again.quarantined == [] and again.unchanged == ["partition:cpu|z-good"]


def test_write_landing_refuses_what_the_store_cannot_hold(tmp_path):
    for change, field in STORE_REFUSED.values():
        with pytest.raises(LandingFileError, match=field):
            write_landing(tmp_path, "partition:cpu|x", _doc([{**_row(), **change}]))
    assert not list(tmp_path.glob("*.json"))


def test_an_insert_failure_the_schema_missed_is_quarantined_and_rolled_back(tmp_path, monkeypatch):
    """Defence in depth: if a bad row got past validation, the DuckDB error quarantines the file."""
    paths = DataPaths(tmp_path)
    write_landing(paths.raw, "partition:cpu|a-first", _doc([_row(run_id="first")]))
    load_landing_files(paths.database, paths.raw)
    _write_raw(paths.raw / "partition__cpu__b-bad.json",
               {**_doc([_row(run_id="bad2", batch=2), {**_row(run_id="bad"), "load_time_s": "slow"}]),
                "source_key": "partition:cpu|b-bad"})
    write_landing(paths.raw, "partition:cpu|c-good", _doc([_row(run_id="good")]))
    from devicefit import landing
    from devicefit.store import loading

    for module in (loading, landing):  # the schema check switched off, to reach the insert
        monkeypatch.setattr(module, "validated_rows", lambda document, what: document["results"])
    report = load_landing_files(paths.database, paths.raw)
    assert "the store refused a row" in dict(report.quarantined)["partition__cpu__b-bad.json"]
    assert report.loaded == [("partition:cpu|c-good", 1)]
    assert _count(paths.database) == 2 and _count(paths.database, "run_id = 'bad2'") == 0  # no half of b-bad


def test_ingesting_a_partition_landing_file_stores_its_rows_once(tmp_path):
    paths = DataPaths(tmp_path / "data")
    landed = write_landing(paths.raw, "partition:cpu|bert-tiny", _doc([_row(), _row("int8", p50=5.0)]))
    load_landing_files(paths.database, paths.raw)
    copy = tmp_path / "partition__cpu__bert-tiny.json"
    copy.write_bytes(landed.read_bytes())
    ingest_file(copy, paths.raw)
    report = load_landing_files(paths.database, paths.raw)
    [(key, skipped)] = report.duplicates
    assert key.startswith("ingest:") and skipped == 2 and report.rows_loaded == 0
    # the same rows inside another surrounding document: still the same rows
    other = {**json.loads(copy.read_text()), "written_at": "2030-01-01T00:00:00+00:00", "hardware": {"hostname": "elsewhere"}}
    other.pop("source_key")
    (tmp_path / "other.json").write_text(json.dumps(other))
    ingest_file(tmp_path / "other.json", paths.raw)
    load_landing_files(paths.database, paths.raw)
    con = store.connect(paths.database)
    try:
        assert con.execute("SELECT count(*) FROM measurements").fetchone()[0] == 2
        assert {r[0] for r in con.execute("SELECT DISTINCT source_key FROM measurements").fetchall()} == {"partition:cpu|bert-tiny"}
        assert sum(r["rows"] for r in store.source_rows(con)) == 2
        store.refresh_aggregates(con)
        assert [r["rows"] for r in store.aggregates(con)] == [1, 1]
    finally:
        con.close()


def test_a_partition_rerun_and_a_reload_keep_one_row_per_natural_key(tmp_path):
    paths = DataPaths(tmp_path)
    write_landing(paths.raw, "partition:cpu|bert-tiny", _doc([_row(run_id="r1")]))
    write_landing(paths.raw, "ingest:copy", _doc([_row(run_id="r1")]))  # a copy, landed beside it
    report = load_landing_files(paths.database, paths.raw)
    assert report.loaded == [("partition:cpu|bert-tiny", 1), ("ingest:copy", 0)] and report.duplicates == [("ingest:copy", 1)]
    from devicefit.checks import sources_have_rows

    con = store.connect(paths.database, read_only=True)
    try:
        assert sources_have_rows(con).passed  # a source whose rows were all stored already is not empty
    finally:
        con.close()
    write_landing(paths.raw, "partition:cpu|bert-tiny", _doc([_row(run_id="r2")]))  # re-measured: a new run id
    load_landing_files(paths.database, paths.raw)
    # r1 left the partition, but the ingested copy still holds it: it is stored once, from there.
    assert _count(paths.database) == 2 and _count(paths.database, "run_id = 'r2' AND source_key = 'partition:cpu|bert-tiny'") == 1
    assert _count(paths.database, "run_id = 'r1' AND source_key = 'ingest:copy'") == 1
    load_landing_files(paths.database, paths.raw)  # nothing changed: nothing moves
    assert _count(paths.database) == 2


@pytest.mark.parametrize("where,value,named", [
    (("report", "forward", "latency", "values"), [True, True], r"report\.forward\.latency\.values\[0\]"),
    (("report", "load", "latency", "values"), ["soon"], r"report\.load\.latency\.values\[0\]"),
    (("config", "scenario"), "inference", r"config\.scenario"),
    (("report", "forward", "latency"), [0.008, 0.009], r"report\.forward\.latency"),
    (("report", "forward", "throughput", "value"), "fast", r"report\.forward\.throughput\.value"),
    (("config", "backend"), "pytorch", r"config\.backend"),
    (("config", "scenario", "input_shapes", "batch_size"), True, r"config\.scenario\.input_shapes\.batch_size"),
    (("report", "forward", "memory", "max_ram"), "2 GB", r"report\.forward\.memory\.max_ram"),
    (("config", "environment", "gpu"), "NVIDIA H100", r"config\.environment\.gpu"),
    (("config", "backend", "model"), 7, r"config\.backend\.model"),
    # finite, but past what a column holds once converted (int(inf) and a sum of infinities crashed)
    (("report", "forward", "memory", "max_ram"), 1e308, r"report\.forward\.memory\.max_ram"),
    (("config", "environment", "cpu_ram_mb"), 1e308, r"config\.environment\.cpu_ram_mb"),
    (("config", "environment", "gpu_vram_mb"), [1e308], r"config\.environment\.gpu_vram_mb"),
    (("report", "forward", "latency", "values"), [1e308] * 6, r"report\.forward\.latency\.values\[0\]"),
])
def test_wrong_typed_optimum_fields_are_refused_by_name(tmp_path, where, value, named):
    config, report = optimum_documents()
    parent = {"config": config, "report": report}[where[0]]
    for key in where[1:-1]:
        parent = parent[key]
    parent[where[-1]] = value
    with pytest.raises(LandingFileError, match=named):
        ingest_file(write_optimum_pair(tmp_path / "pair", config, report), tmp_path / "raw")
    assert not (tmp_path / "raw").exists() or not list((tmp_path / "raw").glob("*.json"))


def test_a_file_nested_too_deeply_to_read_is_quarantined(tmp_path):
    paths = DataPaths(tmp_path)
    paths.raw.mkdir(parents=True)
    (paths.raw / "partition__cpu__a-deep.json").write_text("[" * 200_000 + "]" * 200_000)
    write_landing(paths.raw, "partition:cpu|z-good", _doc([_row(run_id="good")]))
    report = load_landing_files(paths.database, paths.raw)
    assert "nested too deeply" in dict(report.quarantined)["partition__cpu__a-deep.json"]
    assert report.loaded == [("partition:cpu|z-good", 1)]


def test_the_ingest_command_says_rows_were_already_stored(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from devicefit.cli import app

    paths = DataPaths(tmp_path / "data")
    monkeypatch.setenv("DEVICEFIT_DATA_DIR", str(paths.root))
    landed = write_landing(paths.raw, "partition:cpu|bert-tiny", _doc([_row(), _row("int8", p50=5.0)]))
    load_landing_files(paths.database, paths.raw)
    copy = tmp_path / "copy.json"
    copy.write_bytes(landed.read_bytes())
    out = CliRunner().invoke(app, ["ingest", str(copy)])
    assert out.exit_code == 0, out.output
    assert "loaded 0 rows" in out.output and "skipped 2 rows of ingest:" in out.output and "not stored twice" in out.output
    assert "other figures" not in out.output  # a byte-for-byte copy: nothing differs
    assert _count(paths.database) == 2


def test_a_corrected_copy_is_said_to_differ_and_a_rebuild_keeps_the_first_owner(tmp_path, monkeypatch):
    """An ingested file corrected by hand (one p50 changed) and ingested again was skipped as a
    plain duplicate; and rebuilding the store from raw/ gave the row to whichever file name (a
    hash) sorted first, so the same raw/ held either figure (found by a fault hunt, 2026-11-30)."""
    import os

    from typer.testing import CliRunner

    from devicefit.cli import app

    paths = DataPaths(tmp_path / "data")
    monkeypatch.setenv("DEVICEFIT_DATA_DIR", str(paths.root))
    original, corrected = tmp_path / "original.json", tmp_path / "corrected.json"
    original.write_text(json.dumps({**_doc([_row(), _row("int8", p50=5.0)]), "source_key": "partition:cpu|bert-tiny"}))
    corrected.write_text(json.dumps({**_doc([_row(), _row("int8", p50=4.0)]), "source_key": "partition:cpu|bert-tiny"}))
    assert CliRunner().invoke(app, ["ingest", str(original)]).exit_code == 0
    out = CliRunner().invoke(app, ["ingest", str(corrected)])
    assert out.exit_code == 0, out.output
    assert "skipped 2 rows of ingest:" in out.output and "1 of them hold other figures than the stored rows" in " ".join(out.output.split())
    stored = "SELECT p50_ms FROM measurements WHERE precision = 'int8'"

    def int8_p50():
        con = store.connect(paths.database, read_only=True)
        try:
            return con.execute(stored).fetchall()
        finally:
            con.close()

    assert int8_p50() == [(5.0,)]
    landed_first = min(paths.raw.glob("ingest__*.json"), key=lambda p: p.stat().st_mtime_ns)
    stamp = landed_first.stat().st_mtime_ns
    assert CliRunner().invoke(app, ["ingest", str(original)]).exit_code == 0
    assert landed_first.stat().st_mtime_ns == stamp  # the same bytes again keep their landing time
    # Whichever file's name (a hash of its rows) sorts last is made the one landed first; a
    # rebuild from raw/ gives the row to it again.
    later_name, earlier_name = sorted(paths.raw.glob("ingest__*.json"), reverse=True)
    os.utime(later_name, (1_000_000_000, 1_000_000_000))
    os.utime(earlier_name, (1_000_000_100, 1_000_000_100))
    owner = [r["p50_ms"] for r in json.loads(later_name.read_text())["results"] if r["precision"] == "int8"]
    paths.database.unlink()
    load_landing_files(paths.database, paths.raw)
    assert int8_p50() == [(owner[0],)]


SPEED_REFUSED = {  # training and regression verdicts divide by these: a real rate or nothing
    "not an object": {"speed_reference": "fast"},
    "a negative rate": {"speed_reference": {"before_gflops": -1.0, "after_gflops": 100.0}},
    "a rate that is a boolean": {"speed_reference": {"before_gflops": True, "after_gflops": 100.0}},
    "a missing rate": {"speed_reference": {"after_gflops": 100.0}},
    "a copy rate of zero": {"speed_reference": {"before_gflops": 100.0, "after_gflops": 100.0, "copy_gbs": 0}},
    "a copy rate that is text": {"speed_reference": {"before_gflops": 100.0, "after_gflops": 100.0, "copy_gbs": "fast"}},
}


@pytest.mark.parametrize("case", SPEED_REFUSED)
def test_a_speed_reference_that_is_not_two_rates_is_quarantined_naming_it(tmp_path, case):
    paths = DataPaths(tmp_path)
    _write_raw(paths.raw / "partition__cpu__a-bad.json",
               {**_doc([{**_row(run_id="bad"), **SPEED_REFUSED[case]}]), "source_key": "partition:cpu|a-bad"})
    good = {"before_gflops": 150.0, "after_gflops": 170.0, "kernel": "fp32 512x512 matmul", "threads": 2, "copy_gbs": 52.5}
    write_landing(paths.raw, "partition:cpu|z-good", _doc([{**_row(run_id="good"), "speed_reference": good}]))
    report = load_landing_files(paths.database, paths.raw)
    assert "speed_reference" in dict(report.quarantined)["partition__cpu__a-bad.json"]
    assert report.loaded == [("partition:cpu|z-good", 1)] and _count(paths.database) == 1
    assert _count(paths.database, "speed_reference.before_gflops = 150.0") == 1  # the good one kept whole
    with pytest.raises(LandingFileError, match="speed_reference"):
        write_landing(tmp_path / "refused", "partition:cpu|x", _doc([{**_row(), **SPEED_REFUSED[case]}]))


@pytest.mark.parametrize("entry", ["broken symlink", "directory"])
def test_an_entry_of_raw_that_is_no_regular_file_is_quarantined_and_the_rest_loads(tmp_path, entry):
    """A broken symlink or a directory named *.json crashed every load (FileNotFoundError,
    IsADirectoryError), and a pipe blocked it (not tested: a regression would hang the suite).
    Landing files and device records alike."""
    import os

    paths = DataPaths(tmp_path)
    write_landing(paths.raw, "partition:cpu|z-good", _doc([_row(run_id="good")]))
    for directory in (paths.raw, paths.raw / "devices"):
        directory.mkdir(parents=True, exist_ok=True)
        bad = directory / "a-bad.json"
        {"broken symlink": lambda: os.symlink(tmp_path / "gone.json", bad), "directory": bad.mkdir}[entry]()
    report = load_landing_files(paths.database, paths.raw)
    reasons = dict(report.quarantined)
    assert set(reasons) == {"a-bad.json", "devices/a-bad.json"} and "not a landing file" in reasons["a-bad.json"]
    assert report.loaded == [("partition:cpu|z-good", 1)] and _count(paths.database) == 1
    assert (paths.raw / "quarantine" / "a-bad.json.reason.txt").is_file()
    again = load_landing_files(paths.database, paths.raw)
    assert again.quarantined == [] and again.unchanged == ["partition:cpu|z-good"]


def test_a_stray_copy_of_a_landing_file_never_replaces_its_rows(tmp_path):
    """An older copy of a partition's file left in raw/ (`.old.json`, "copy of") loads under the
    same source key: it replaced the partition's rows at every load, the last in name order
    winning, so the store held the copy's 1 row instead of the partition's 2."""
    paths = DataPaths(tmp_path)
    landed = write_landing(paths.raw, "partition:cpu|bert-tiny", _doc([_row(run_id="old")]))
    load_landing_files(paths.database, paths.raw)  # loaded from the copy's bytes, at the copy's path
    stray = paths.raw / "partition__cpu__bert-tiny.old.json"
    landed.rename(stray)
    load_landing_files(paths.database, paths.raw)
    write_landing(paths.raw, "partition:cpu|bert-tiny", _doc([_row(run_id="new"), _row("int8", run_id="new")]))
    for _ in range(2):
        report = load_landing_files(paths.database, paths.raw)
        assert _count(paths.database) == 2 and _count(paths.database, "run_id = 'new'") == 2
    assert report.loaded == [] and report.unchanged == ["partition:cpu|bert-tiny"]
    assert "partition__cpu__bert-tiny.json" in (paths.raw / "quarantine" / f"{stray.name}.reason.txt").read_text()


def test_a_name_quarantined_twice_keeps_both_files_and_both_reasons(tmp_path):
    """The same partition's file refused at two loads: the second went over the first in
    quarantine/, file and reason, so the first bad file was lost. Both are kept now."""
    paths = DataPaths(tmp_path)
    for attempt in ("first", "second"):
        _write_raw(paths.raw / "partition__cpu__bert-tiny.json", {"attempt": attempt})
        report = load_landing_files(paths.database, paths.raw)
        assert [name for name, _ in report.quarantined] == ["partition__cpu__bert-tiny.json"]
    kept = sorted(p.name for p in (paths.raw / "quarantine").iterdir())
    assert kept == ["partition__cpu__bert-tiny.1.json", "partition__cpu__bert-tiny.1.json.reason.txt",
                    "partition__cpu__bert-tiny.json", "partition__cpu__bert-tiny.json.reason.txt"]
    assert json.loads((paths.raw / "quarantine" / "partition__cpu__bert-tiny.json").read_text()) == {"attempt": "first"}
    assert json.loads((paths.raw / "quarantine" / "partition__cpu__bert-tiny.1.json").read_text()) == {"attempt": "second"}


@pytest.mark.parametrize("field", ["p50_ms", "mean_ms", "throughput_samples_per_s"])
def test_an_ok_row_with_a_zero_figure_is_refused_by_name(tmp_path, field):
    """An 'ok' row with p50_ms 0 (its samples positive) passed validation, loaded, and made
    `devicefit analyze --output`, `recommendations` and `report` end in ZeroDivisionError tracebacks
    and the aggregates' speedup infinite (found by a fault hunt)."""
    with pytest.raises(LandingFileError, match=f"results\\[0\\] is 'ok' with {field}=0.0"):
        write_landing(tmp_path, "partition:cpu|x", _doc([{**_row(), field: 0.0}]))


def test_a_landing_file_of_gigabytes_is_quarantined_unread_and_ingest_refuses_it(tmp_path, monkeypatch):
    """Every load reads each file whole: a multi-GB dump saved as *.json in raw/ took the pipeline's
    memory. A sparse file (no disk used) over the cap is set aside unread, naming its size."""
    from devicefit import landing

    paths = DataPaths(tmp_path)
    write_landing(paths.raw, "partition:cpu|z-good", _doc([_row(run_id="good")]))
    huge = paths.raw / "a-dump.json"
    with open(huge, "wb") as fh:
        fh.truncate(landing.MAX_LANDING_BYTES + 1)
    read = []
    original = type(huge).read_bytes
    monkeypatch.setattr(type(huge), "read_bytes", lambda self: read.append(self.name) or original(self))
    report = load_landing_files(paths.database, paths.raw)
    reasons = dict(report.quarantined)
    assert set(reasons) == {"a-dump.json"} and "256 MiB a landing document may hold" in reasons["a-dump.json"]
    assert "a-dump.json" not in read and report.loaded == [("partition:cpu|z-good", 1)]
    with pytest.raises(LandingFileError, match="over the 256 MiB"):
        ingest_file(paths.raw / "quarantine" / "a-dump.json", paths)


def _nested(levels: int) -> list:
    return json.loads("[" * levels + "]" * levels)


@pytest.mark.parametrize("field", ["policy", "backend_config", "environment"])
def test_a_json_column_nested_hundreds_deep_is_quarantined_not_a_recursion_error(tmp_path, field):
    """500 levels pass the JSON parser and json.dumps, but the row is copied recursively on its way
    into the store (dataclasses.asdict): the file was landed, then every load of raw/ ended in
    RecursionError, the good files after it included (found by a fault hunt)."""
    value = {"versions": {"torch_version": _nested(500)}} if field == "environment" else {"x": _nested(500)}
    paths = DataPaths(tmp_path)
    _write_raw(paths.raw / "ingest__a-deep.json", {**_doc([{**_row(run_id="deep"), field: value}]), "source_key": "ingest:a-deep"})
    write_landing(paths.raw, "partition:cpu|z-good", _doc([_row(run_id="good")]))
    report = load_landing_files(paths.database, paths.raw)
    assert "nested more than 64 levels deep" in dict(report.quarantined)["ingest__a-deep.json"]
    assert report.loaded == [("partition:cpu|z-good", 1)]
    with pytest.raises(LandingFileError, match=f"{field}.*nested more than 64 levels deep"):
        write_landing(tmp_path / "other", "ingest:x", _doc([{**_row(), field: value}]))


def test_optimum_output_nested_hundreds_deep_is_refused_not_a_recursion_error(tmp_path):
    """An optimum-benchmark environment's *_version values ride into the row's versions; one nested
    500 levels ended `devicefit ingest` in a RecursionError traceback."""
    config, report = optimum_documents()
    config["environment"]["torch_version"] = _nested(500)
    with pytest.raises(LandingFileError, match="nested more than 64 levels deep"):
        ingest_file(write_optimum_pair(tmp_path / "pair", config, report), tmp_path / "raw")
    assert not (tmp_path / "raw").exists()


def test_ingest_names_a_file_it_cannot_read_and_one_that_is_no_regular_file(tmp_path, monkeypatch):
    """`devicefit ingest` of a file whose read fails (EIO: /proc/self/mem, a failing disk) said only
    'Input/output error (OSError)', in a directory of files without saying which; a FIFO or
    /dev/zero was 'no such file'."""
    import errno
    import os
    from pathlib import Path

    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)
    with pytest.raises(LandingFileError, match="pipe.json: not a regular file"):
        ingest_file(fifo, tmp_path / "raw")
    directory = tmp_path / "landing"
    directory.mkdir()
    (directory / "a.json").write_text(json.dumps(_doc([_row(run_id="a")])))
    (directory / "b.json").write_text(json.dumps(_doc([_row(run_id="b")])))
    original = Path.read_text

    def failing(self, *args, **kwargs):
        if self.name == "b.json":
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Path, "read_text", failing)
    with pytest.raises(LandingFileError, match=r"b\.json: cannot be read \(Input/output error\)"):
        ingest_path(directory / "b.json", tmp_path / "raw")
    with pytest.raises(LandingFileError, match=r"b\.json: cannot be read"):
        ingest_path(directory, tmp_path / "raw")
    assert not (tmp_path / "raw").exists()


def _absurd(row: dict, p50: float, throughput: float = 100.0) -> dict:
    return {**row, "samples_ms": [p50] * 3, "p50_ms": p50, "mean_ms": p50, "throughput_samples_per_s": throughput}


def test_a_sub_nanosecond_timing_is_quarantined_and_never_published_as_infinity(tmp_path):
    """5e-321 ms is positive and finite, so it passed; the aggregates' speedup_vs_cpu_fp32 (the CPU's
    fp32 p50 over it) overflowed and the published benchmarks.json held Infinity, which is not JSON
    (a consumer validating it with the published schema cannot parse it). Found by a fault hunt."""
    from devicefit.pipeline import refresh_aggregates

    paths = DataPaths(tmp_path)
    write_landing(paths.raw, "partition:cpu|bert-tiny", _doc([_row(run_id="base")]))
    _write_raw(paths.raw / "ingest__absurd.json",
               {**_doc([_absurd(_row(precision="bf16", run_id="absurd"), 5e-321)]), "source_key": "ingest:absurd"})
    report = load_landing_files(paths.database, paths.raw)
    assert "samples_ms 5e-321: not a measurement" in dict(report.quarantined)["ingest__absurd.json"]
    refresh_aggregates(paths)

    def no_constant(name):
        raise AssertionError(f"the published snapshot holds {name}, which is not JSON")
    json.loads((paths.outputs / "benchmarks.json").read_text(), parse_constant=no_constant)


@pytest.mark.parametrize("p50, throughput, named", [
    (5e-321, 100.0, "samples_ms 5e-321"),
    (1e300, 100.0, "samples_ms 1e+300"),  # over a year: its ratio to a 0.5 ms row overflowed the same way
    (10.0, 5e-324, "throughput_samples_per_s 5e-324"),
    (10.0, 1e300, "throughput_samples_per_s 1e+300"),
])
def test_an_ok_row_with_a_figure_no_clock_measures_is_refused_by_name(tmp_path, p50, throughput, named):
    with pytest.raises(LandingFileError, match=rf"results\[0\] is 'ok' with {re.escape(named)}: not a measurement"):
        write_landing(tmp_path, "ingest:x", _doc([_absurd(_row(), p50, throughput)]))


def test_optimum_latencies_under_a_nanosecond_are_refused_by_field(tmp_path):
    config, report = optimum_documents()
    report["forward"]["latency"]["values"] = [5e-324] * 4
    with pytest.raises(LandingFileError, match=r"report\.forward\.latency\.values: 5e-324 s is under a nanosecond"):
        ingest_file(write_optimum_pair(tmp_path / "pair", config, report), tmp_path / "raw")


def _partition_file(directory, name: str, run_id: str, hostname: str = "h") -> None:
    document = {**_doc([_row(run_id=run_id, hostname=hostname)]), "source_key": "partition:cpu|bert-tiny",
                "hardware": {"hostname": hostname}}
    _write_raw(directory / name, document)


def test_a_directory_with_a_stray_copy_of_a_partition_is_refused_not_stored_twice(tmp_path):
    """Where it was written the loader keeps partition__cpu__bert-tiny.json and quarantines the
    .old.json copy (an older run): one run of the partition. Ingesting that directory made each
    file a source of its own and stored both runs (18 rows of one 9-row partition, found by a fault
    hunt with benchmarks/datasets/epyc-2c)."""
    machine = tmp_path / "other-machine-raw"
    _partition_file(machine, "partition__cpu__bert-tiny.json", "newer")
    _partition_file(machine, "partition__cpu__bert-tiny.old.json", "older")
    with pytest.raises(LandingFileError, match=r"bert-tiny.old.json: holds the same source \(partition:cpu\|bert-tiny\) of the "
                                               r"same machine as partition__cpu__bert-tiny.json"):
        ingest_path(machine, tmp_path / "raw")
    assert not (tmp_path / "raw").exists()


def test_two_machines_files_of_one_partition_are_both_ingested(tmp_path):
    gathered = tmp_path / "gathered"
    _partition_file(gathered, "a-partition__cpu__bert-tiny.json", "on-a", hostname="a")
    _partition_file(gathered, "b-partition__cpu__bert-tiny.json", "on-b", hostname="b")
    paths = DataPaths(tmp_path / "data")
    assert len(ingest_path(gathered, paths.raw)) == 2
    load_landing_files(paths.database, paths.raw)
    assert _count(paths.database) == 2


def _probed_file(path, run_id: str, detected_at: str, gflops: float, contended: bool | None = None) -> None:
    """A foreign landing file of one row on device cpu-abc, its hardware block carrying a probe."""
    probe = {"fingerprint": "cpu-abc", "matmul_gflops_best": gflops, "memory_bandwidth_gbs_best": 27.0}
    if contended is not None:
        probe["contended"] = contended
    hardware = {"hostname": "vm", "detected_at": detected_at, "probes": {"cpu": probe},
                "platforms": {"cpu": {"available": True, "devices": [{"name": "Xeon", "fingerprint": "cpu-abc"}]}}}
    _write_raw(path, {**_doc([{**_row(run_id=run_id), "hardware_fingerprint": "cpu-abc"}]), "hardware": hardware})


def _stored_probes(db) -> tuple[dict, dict]:
    con = store.connect(db, read_only=True)
    try:
        [(hardware,)] = con.execute("SELECT probe FROM hardware WHERE fingerprint = 'cpu-abc'").fetchall()
        [(device,)] = con.execute("SELECT probe FROM devices WHERE id = 'cpu-abc'").fetchall()
    finally:
        con.close()
    return json.loads(hardware), json.loads(device)


@pytest.mark.parametrize("future_first", [True, False])
def test_a_probe_stamped_in_the_future_never_outranks_a_stamped_one_and_ingest_says_so(tmp_path, monkeypatch, future_first):
    """A foreign file's probe stamped 9999-01-01 became the device's probe for good: every probe
    measured after it was 'older' (found by a fault hunt). Ingested before or after a real probe,
    the real one is kept in the hardware table and the device's, and ingest names the stamp."""
    from datetime import datetime, timedelta, timezone

    from typer.testing import CliRunner

    from devicefit.cli import app

    paths = DataPaths(tmp_path / "data")
    monkeypatch.setenv("DEVICEFIT_DATA_DIR", str(paths.root))
    now = datetime.now(timezone.utc)
    _probed_file(tmp_path / "future.json", "from-the-future", "9999-01-01T00:00:00+00:00", 400.0)
    _probed_file(tmp_path / "real.json", "real", (now - timedelta(hours=1)).isoformat(), 330.0)
    outputs = {}
    for name in (["future", "real"] if future_first else ["real", "future"]):
        out = CliRunner().invoke(app, ["ingest", str(tmp_path / f"{name}.json")])
        assert out.exit_code == 0, out.output
        outputs[name] = out.output
    hardware, device = _stored_probes(paths.database)
    assert hardware["matmul_gflops_best"] == 330.0 and device["matmul_gflops_best"] == 330.0
    assert "the probe of cpu-abc is stamped 9999-01-01T00:00:00+00:00, more than a day past this machine's clock" \
        in outputs["future"]
    assert "past this machine's clock" not in outputs["real"]
    assert _count(paths.database) == 2  # the rows themselves load


def test_the_kept_probe_trusts_a_stamp_up_to_a_day_ahead_of_the_clock():
    """Clocks differ between machines: a probe stamped hours ahead is still the newer one; one
    stamped past the tolerance loses to any stamped probe, in either order."""
    from datetime import datetime

    from devicefit.store.devices import kept_probe

    now = datetime(2026, 11, 29, 12, 0)
    real = {"matmul_gflops_best": 1.0, "detected_at": "2026-11-28T12:00:00+00:00"}
    hours_ahead = {"matmul_gflops_best": 2.0, "detected_at": "2026-11-30T06:00:00+00:00"}
    far_ahead = {"matmul_gflops_best": 3.0, "detected_at": "2026-12-01T00:00:00+00:00"}
    for a, b, winner in [(real, hours_ahead, hours_ahead), (real, far_ahead, real), (hours_ahead, far_ahead, hours_ahead)]:
        assert kept_probe(a, b, now) is winner and kept_probe(b, a, now) is winner, (a, b)


@pytest.mark.parametrize("future_first", [True, False])
def test_an_undisturbed_probe_stamped_in_the_future_never_outranks_a_real_contended_one(tmp_path, future_first):
    """Contention was weighed before time, so a foreign file's uncontended probe stamped
    9999-01-01 still replaced a real contended probe (and held the device's probe until an
    uncontended one came; found by a fault hunt). In either order of ingest the real one is kept."""
    from datetime import datetime, timedelta, timezone

    paths = DataPaths(tmp_path / "data")
    now = datetime.now(timezone.utc)
    _probed_file(tmp_path / "future.json", "from-the-future", "9999-01-01T00:00:00+00:00", 400.0, contended=False)
    _probed_file(tmp_path / "real.json", "real", (now - timedelta(hours=1)).isoformat(), 140.0, contended=True)
    for name in (["future", "real"] if future_first else ["real", "future"]):
        ingest_path(tmp_path / f"{name}.json", paths.raw)
        report = load_landing_files(paths.database, paths.raw)
        assert report.future_probes == ([(report.loaded[0][0], "cpu-abc", "9999-01-01T00:00:00+00:00")]
                                        if name == "future" else [])
    hardware, device = _stored_probes(paths.database)
    assert hardware["matmul_gflops_best"] == 140.0 and device["matmul_gflops_best"] == 140.0
    assert _count(paths.database) == 2


def test_the_kept_probe_weighs_a_believable_stamp_before_contention_then_time():
    """The order kept_probe applies, each pair in both orders: a believable stamp (or none) over
    one past the clock's tolerance whatever their contention; then undisturbed over disturbed;
    then the later, a stamped probe over one without a time."""
    from datetime import datetime

    from devicefit.store.devices import kept_probe

    now = datetime(2026, 11, 29, 12, 0)
    future = "9999-01-01T00:00:00+00:00"
    real_busy = {"matmul_gflops_best": 1.0, "detected_at": "2026-11-28T12:00:00+00:00", "contended": True}
    real_idle_older = {"matmul_gflops_best": 2.0, "detected_at": "2026-11-20T12:00:00+00:00"}
    unstamped_busy = {"matmul_gflops_best": 3.0, "contended": True}
    unstamped_idle = {"matmul_gflops_best": 4.0}
    future_idle = {"matmul_gflops_best": 5.0, "detected_at": future, "contended": False}
    future_busy = {"matmul_gflops_best": 6.0, "detected_at": future, "contended": True}
    for a, b, winner in [(real_busy, future_idle, real_busy), (unstamped_busy, future_idle, unstamped_busy),
                         (future_busy, future_idle, future_idle), (real_busy, real_idle_older, real_idle_older),
                         (unstamped_idle, real_busy, unstamped_idle), (unstamped_idle, real_idle_older, real_idle_older),
                         (future_idle, None, future_idle)]:
        assert kept_probe(a, b, now) is winner and kept_probe(b, a, now) is winner, (a, b)


@pytest.mark.parametrize("field, value", [
    ("matmul_gflops_best", 1e300), ("matmul_gflops_bf16_best", 1e9), ("memory_bandwidth_gbs_best", 1e7),
    ("cache_copy_gbs_best", 5e-324), ("tiny_kernel_us_median", 1e-9), ("matmul_gflops_fp16_best", 1e-6),
    ("matmul_gflops_median", 1e300), ("memory_bandwidth_gbs_median", 1e7), ("memory_bandwidth_gbs_median", 5e-324),
])
def test_a_probe_figure_no_machine_measures_is_quarantined_naming_it(tmp_path, field, value):
    """Any positive figure passed: a probe of 1e300 GFLOP/s became the device's peak, which
    predictions scale by (found by a fault hunt)."""
    paths = DataPaths(tmp_path)
    probe = {"fingerprint": "cpu-abc", "matmul_gflops_best": 330.0, field: value}
    _write_raw(paths.raw / "ingest__absurd.json", {**_doc([_row(run_id="absurd")]), "source_key": "ingest:absurd",
                                                   "hardware": {"probes": {"cpu": probe}}})
    write_landing(paths.raw, "partition:cpu|z-good", _doc([_row(run_id="good")]))
    report = load_landing_files(paths.database, paths.raw)
    assert f"hardware.probes.cpu.{field}: Value error, {value!r} is not a measurement" in dict(report.quarantined)["ingest__absurd.json"]
    assert report.loaded == [("partition:cpu|z-good", 1)] and _count(paths.database) == 1
    with pytest.raises(LandingFileError, match=rf"hardware\.probes\.cpu\.{field}"):
        write_landing(tmp_path / "refused", "ingest:x", {**_doc([_row()]), "hardware": {"probes": {"cpu": probe}}})


@pytest.mark.parametrize("suite, where", [
    ({"gflops_median": {"openvino": {"128x768x768": 1e300}}}, "backend_gemm.gflops_median.openvino.128x768x768"),
    ({"median_over_shapes": {"torch": 5e-324}}, "backend_gemm.median_over_shapes.torch"),
    ({"median_over_shapes": {"torch": -3.0}}, "backend_gemm.median_over_shapes.torch"),
    ({"gflops_median": {"../etc": {"128x768x768": 100.0}}}, "(got '../etc')"),  # no backend's name
    ({"gflops_median": {"torch": {"128x768x768; rm -rf": 100.0}}}, "(got '128x768x768; rm -rf')"),  # no shape's
    ({"median_over_shapes": {f"b{i}": 100.0 for i in range(17)}}, "backend_gemm.median_over_shapes"),
    ({"errors": {"openvino": "x" * 401}}, "backend_gemm.errors.openvino"),
])
def test_a_backend_gemm_rate_no_machine_measures_is_quarantined_naming_it(tmp_path, suite, where):
    """The host CPU's per-backend GEMM rates are bounded as the probe's matmul is: a transfer
    between machines is to scale by them."""
    paths = DataPaths(tmp_path)
    probe = {"fingerprint": "cpu-abc", "matmul_gflops_best": 330.0, "backend_gemm": suite}
    _write_raw(paths.raw / "ingest__absurd.json", {**_doc([_row(run_id="absurd")]), "source_key": "ingest:absurd",
                                                   "hardware": {"probes": {"cpu": probe}}})
    write_landing(paths.raw, "partition:cpu|z-good", _doc([_row(run_id="good")]))
    report = load_landing_files(paths.database, paths.raw)
    reason = dict(report.quarantined)["ingest__absurd.json"]
    assert "hardware.probes.cpu.backend_gem" in reason and (f"hardware.probes.cpu.{where}" in reason or where in reason), reason
    assert report.loaded == [("partition:cpu|z-good", 1)] and _count(paths.database) == 1


@pytest.mark.parametrize("field, value", [("model", "   "), ("run_id", " "), ("config_key", "\t \n"), ("backend", "  "),
                                          ("model", "\u3000"), ("model", "\u200b\u200b"), ("run_id", "\u2060"),
                                          ("config_key", "\ufeff"), ("backend", " \u200b "), ("device", "\u200d\u00ad"),
                                          ("model", "\x00")])
def test_a_required_field_of_only_whitespace_is_quarantined_naming_it(tmp_path, field, value):
    """A row whose model, run_id or config_key was only spaces passed the 'lacks' check (only None
    and "" failed it) and was stored under a name that is none; so did one of only zero-width or
    other invisible format characters ("\u200b\u200b", "\ufeff"), which str.strip keeps (found by
    fault hunts)."""
    paths = DataPaths(tmp_path / "data")
    _write_raw(paths.raw / "ingest__blank.json", {**_doc([{**_row(run_id="blank"), field: value}]), "source_key": "ingest:blank"})
    write_landing(paths.raw, "partition:cpu|z-good", _doc([_row(run_id="good")]))
    report = load_landing_files(paths.database, paths.raw)
    assert dict(report.quarantined)["ingest__blank.json"].endswith(f"results[0] lacks {field}: only whitespace or invisible characters")
    assert report.loaded == [("partition:cpu|z-good", 1)] and _count(paths.database) == 1
    foreign = tmp_path / "foreign.json"
    _write_raw(foreign, _doc([{**_row(run_id="blank"), field: value}]))
    with pytest.raises(LandingFileError, match=rf"lacks {field}: only whitespace or invisible characters"):
        ingest_file(foreign, tmp_path / "raw")
    assert not (tmp_path / "raw").exists()


@pytest.mark.parametrize("field, value", [("before_gflops", 1e300), ("after_gflops", 5e-324), ("copy_gbs", 1e7),
                                          ("before_gflops", 1e9)])
@pytest.mark.parametrize("carrier", ["row", "probe"])
def test_a_speed_reference_rate_no_machine_measures_is_quarantined_naming_it(tmp_path, field, value, carrier):
    """A row's or probe's speed_reference took any positive number (before_gflops 1e300), which
    the predictors scale each row and probe by (found by a fault hunt): it keeps the probe's
    matmul and copy bounds."""
    paths = DataPaths(tmp_path)
    reference = {"before_gflops": 180.0, "after_gflops": 190.0, "copy_gbs": 30.0, field: value}
    row, hardware = _row(run_id="absurd"), {}
    if carrier == "row":
        row["speed_reference"] = reference
    else:
        hardware = {"probes": {"cpu": {"fingerprint": "cpu-abc", "matmul_gflops_best": 330.0, "speed_reference": reference}}}
    _write_raw(paths.raw / "ingest__absurd.json", {**_doc([row]), "source_key": "ingest:absurd", "hardware": hardware})
    write_landing(paths.raw, "partition:cpu|z-good", _doc([_row(run_id="good")]))
    report = load_landing_files(paths.database, paths.raw)
    where = "results[0]" if carrier == "row" else "hardware.probes.cpu"
    assert (f"{where}: speed_reference.{field}: Value error, {value!r} is not a measurement: a speed reference's {field}"
            if carrier == "row" else f"{where}.speed_reference.{field}: Value error, {value!r} is not a measurement") \
        in dict(report.quarantined)["ingest__absurd.json"]
    assert report.loaded == [("partition:cpu|z-good", 1)] and _count(paths.database) == 1


def test_a_real_speed_reference_still_loads(tmp_path):
    paths = DataPaths(tmp_path)
    reference = {"before_gflops": 0.5, "after_gflops": 786429.0, "copy_gbs": 8000.0, "kernel": "k", "threads": 2}
    write_landing(paths.raw, "partition:cpu|a", _doc([{**_row(run_id="a"), "speed_reference": reference}]))
    assert load_landing_files(paths.database, paths.raw).loaded == [("partition:cpu|a", 1)]


@pytest.mark.parametrize("name", ["bert\u200btiny", "\u200bgpt2", "t5-small\ufeff", "ｇｐｔ２"])
def test_a_required_field_with_a_visible_character_beside_invisible_ones_is_not_blank(tmp_path, name):
    """Only a value with nothing visible is blank: a name holding a zero-width character among
    visible ones is still a name (kept as it came)."""
    paths = DataPaths(tmp_path)
    write_landing(paths.raw, "partition:cpu|a", _doc([{**_row(run_id="a"), "model": name}]))
    assert load_landing_files(paths.database, paths.raw).loaded == [("partition:cpu|a", 1)]


def test_the_pipelines_load_reports_a_probe_stamped_in_the_future(tmp_path):
    """Only `devicefit ingest` said so: the benchmark_results asset's load (pipeline.load_results)
    filled LoadReport.future_probes and showed nothing of it. The lines it logs and the records of
    its `future_probes` metadata come from the report, as ingest's lines do."""
    from devicefit.pipeline import load_results

    paths = DataPaths(tmp_path)
    _probed_file(paths.raw / "ingest__future.json", "from-the-future", "9999-01-01T00:00:00+00:00", 400.0)
    report = load_results(paths)
    (key,) = [k for k, _ in report.loaded]
    assert report.future_probe_rows() == [{"source": key, "fingerprint": "cpu-abc", "stamp": "9999-01-01T00:00:00+00:00"}]
    assert report.future_probe_lines() == [
        f"{key}: the probe of cpu-abc is stamped 9999-01-01T00:00:00+00:00, more than a day past this machine's clock: "
        "never kept over a probe with a believable stamp (or none), whatever either's contention"]
    assert load_results(paths).future_probe_lines() == []  # unchanged sources are not loaded again


def test_the_benchmark_results_asset_logs_and_lists_a_probe_stamped_in_the_future(tmp_path):
    import dagster as dg

    from assets.resources import devicefit_resources
    from assets.results import benchmark_results

    paths = DataPaths(tmp_path)
    _probed_file(paths.raw / "ingest__future.json", "from-the-future", "9999-01-01T00:00:00+00:00", 400.0)
    instance = dg.DagsterInstance.ephemeral()
    result = dg.materialize([benchmark_results], resources=devicefit_resources(str(tmp_path)), instance=instance)
    assert result.success
    (event,) = result.get_asset_materialization_events()
    (listed,) = event.materialization.metadata["future_probes"].value
    assert listed["fingerprint"] == "cpu-abc" and listed["stamp"] == "9999-01-01T00:00:00+00:00"
    warnings = [r.user_message for r in instance.all_logs(result.run_id) if r.level == logging.WARNING]
    assert any("the probe of cpu-abc is stamped 9999-01-01T00:00:00+00:00, more than a day past" in m for m in warnings)


def test_the_benchmark_results_asset_lists_rows_it_skipped_as_already_stored(tmp_path):
    """Only `devicefit ingest` said that a source's rows were skipped as another source's (the
    same run_id and config_key): the asset's load counted them and showed nothing."""
    import dagster as dg

    from assets.resources import devicefit_resources
    from assets.results import benchmark_results

    paths = DataPaths(tmp_path)
    for name in ("ingest__one.json", "ingest__two.json"):  # one measurement, landed twice
        _probed_file(paths.raw / name, "same-run", "2026-11-28T00:00:00+00:00", 400.0)
    instance = dg.DagsterInstance.ephemeral()
    result = dg.materialize([benchmark_results], resources=devicefit_resources(str(tmp_path)), instance=instance)
    assert result.success
    (event,) = result.get_asset_materialization_events()
    (listed,) = event.materialization.metadata["duplicates"].value
    assert listed["rows_skipped"] == 1 and event.materialization.metadata["rows_loaded"].value == 1
    infos = [r.user_message for r in instance.all_logs(result.run_id) if r.level == logging.INFO]
    assert any(f"skipped 1 rows of {listed['source']}: already stored by another source" in m for m in infos)



def test_a_later_run_of_a_partition_ingested_later_replaces_the_earlier_one(tmp_path):
    """Two runs of one partition on one machine (make runs 31 and 32 on the AVX2 EPYC), ingested
    by two commands: both were stored and every aggregate became the median of the two, though
    one directory holding both was refused and a re-run where it was measured replaces its rows
    (found by a fault hunt, 2026-11-30). The older run ingested after the newer is refused."""
    from pathlib import Path

    datasets = Path(__file__).resolve().parents[2] / "benchmarks" / "datasets"
    name = "partition__cpu-245a6e58dfb9__bert-tiny.json"
    paths = DataPaths(tmp_path / "data")
    runs = {}
    for run in ("epyc-2c-run31", "epyc-2c-run32"):
        (tmp_path / run).mkdir()
        (tmp_path / run / name).write_bytes((datasets / run / name).read_bytes())
        runs[run] = json.loads((datasets / run / name).read_text())["run_id"]
    [first] = ingest_path(tmp_path / "epyc-2c-run31", paths.raw)
    load_landing_files(paths.database, paths.raw)
    [second] = ingest_path(tmp_path / "epyc-2c-run32", paths.raw)
    assert second.source_key == first.source_key and second.landing_path == first.landing_path
    report = load_landing_files(paths.database, paths.raw)
    assert report.loaded == [(second.source_key, second.rows)]
    con = store.connect(paths.database, read_only=True)
    try:
        assert con.execute("SELECT DISTINCT run_id FROM measurements").fetchall() == [(runs["epyc-2c-run32"],)]
    finally:
        con.close()
    with pytest.raises(LandingFileError, match=rf"run {runs['epyc-2c-run31']} .* is older than the run {runs['epyc-2c-run32']}"):
        ingest_path(tmp_path / "epyc-2c-run31", paths.raw)
    assert json.loads(second.landing_path.read_text())["run_id"] == runs["epyc-2c-run32"]
