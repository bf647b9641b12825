"""Outputs and baselines cut or failing part-way: a baseline CSV cut mid-row is refused, not
read as a smaller baseline; a report written atomically, its stale figures removed."""
import os
import subprocess

import pytest

from devicefit.reports.baselines import BaselineError, ConfigIdentity, SampleSet, sets_from_csv, write_baseline_csv


def _baseline(tmp_path):
    """A baseline CSV as `compare --export-baseline` writes it: three configs with samples."""
    sets = [SampleSet(ConfigIdentity(f"m{i}", "cpu", "torch", "fp32", "inference", 1, None), [10.0 + i, 11.25 + i, 12.5 + i],
                      11.25 + i, "run-1", "cpu-x") for i in range(3)]
    return write_baseline_csv(sets, tmp_path / "base.csv")


def _cut(path, text, name):
    out = path.parent / name
    out.write_bytes(text.encode())
    return out


@pytest.mark.parametrize("cut", [
    lambda last: last[: last.rindex(";") + 2],    # the last sample cut mid-number: "13.5;14.75" -> "13.5;1"
    lambda last: last[: last.rindex(",") - 1],    # p50_ms cut short: a field fewer than the header
    lambda last: last[: last.index(",", 3)],      # cut after two fields
])
def test_a_baseline_csv_cut_in_its_last_row_is_refused_naming_the_line(tmp_path, cut):
    """A copy interrupted mid-row read as a smaller valid baseline: a short row's missing fields
    were filled with None (a row with no samples compared by its cut p50), and a sample list cut
    mid-number made a regression out of nothing; the configs after the cut were "new"."""
    path = _baseline(tmp_path)
    *head, last = path.read_text().splitlines(keepends=True)
    damaged = _cut(path, "".join(head) + cut(last.rstrip("\r\n")), "cut.csv")
    with pytest.raises(BaselineError, match=r"cut\.csv line 4 is cut short"):
        sets_from_csv(damaged)


def test_a_short_row_inside_a_baseline_csv_is_refused(tmp_path):
    path = _baseline(tmp_path)
    lines = path.read_text().splitlines(keepends=True)
    lines[2] = lines[2][: lines[2].rindex(",")] + "\r\n"
    with pytest.raises(BaselineError, match=r"line 3 is cut short or damaged: it has 11 fields where the header has 12"):
        sets_from_csv(_cut(path, "".join(lines), "short.csv"))


def test_a_whole_baseline_csv_without_its_final_line_end_is_read(tmp_path):
    """A file whose last row is whole but has lost its final newline (an editor's save) is still
    the same baseline."""
    path = _baseline(tmp_path)
    whole = sets_from_csv(path)
    trimmed = sets_from_csv(_cut(path, path.read_text().rstrip("\r\n"), "nonl.csv"))
    assert [(s.identity, s.samples_ms, s.p50_ms) for s in trimmed] == [(s.identity, s.samples_ms, s.p50_ms) for s in whole]
    assert len(trimmed) == 3


def _report_data(model: str = "m"):
    from devicefit.reports.data import ReportData, labelled

    rows = [{"model": model, "family": "embedding", "input_dims": "{}", "mode": "inference", "precision": precision, "batch_size": batch,
             "p50_ms": 2.0 * batch, "device_kind": "cpu", "backend": "torch", "host": "cpu-x", "accelerator": None, "device_name": "Xeon",
             "hostname": "vm", "throughput_samples_per_s": 500.0 / batch, "peak_rss_bytes": 2**29, "runs": 1}
            for precision in ("fp32", "bf16") for batch in (1, 2)]
    return ReportData(labelled(rows))


def test_a_report_removes_its_own_figures_it_no_longer_draws_and_nothing_else(tmp_path):
    """A figure an earlier report drew (the predictor's, before it was removed) and PNGs of an
    earlier --png run stayed beside the new index, dated like the rest of the report."""
    from devicefit.reports.dashboard import write_report

    directory = tmp_path / "report"
    directory.mkdir()
    stale = ["predicted_vs_measured.html", "predicted_vs_measured.png", "hardware_comparison.png"]
    mine = ["notes.txt", "predicted_vs_measured.html.bak", "custom.html"]
    for name in stale + mine:
        (directory / name).write_text("an earlier run's")
    out = write_report(_report_data(), directory, png=False)
    assert "predicted_vs_measured" in out.missing and "hardware_comparison" in out.html and out.png == {}
    assert [n for n in stale if (directory / n).exists()] == []
    assert all((directory / n).read_text() == "an earlier run's" for n in mine)
    assert "an earlier run" not in (directory / "hardware_comparison.html").read_text()


def test_a_report_cut_by_a_full_disk_leaves_the_previous_report_whole(tmp_path):
    """Written in place, a full disk part-way through cut the previous report's pages (each file
    truncated, then written short) and the run failed with neither report readable."""
    import errno

    from devicefit.reports.dashboard import write_report
    from tests.faults.conftest import _mount_small_disk

    disk = tmp_path / "disk"
    disk.mkdir()
    reason = _mount_small_disk(disk, "12m")
    if reason:
        pytest.skip(reason)
    try:
        directory = disk / "report"
        write_report(_report_data("first"), directory, png=False)
        before = {p.name: p.read_bytes() for p in directory.iterdir()}
        stat = os.statvfs(disk)
        (disk / "filler").write_bytes(b"\0" * (stat.f_bavail * stat.f_frsize - 4096))  # leave a page free
        with pytest.raises(OSError) as raised:  # a longer model name: pages larger than the ones they replace
            write_report(_report_data("second-" + "x" * 20_000), directory, png=False)
        assert raised.value.errno == errno.ENOSPC
        assert {p.name: p.read_bytes() for p in directory.iterdir()} == before
    finally:
        subprocess.run(["umount", str(disk)], capture_output=True)
        if os.path.ismount(disk):
            subprocess.run(["umount", "-l", str(disk)], capture_output=True)


@pytest.mark.parametrize("option", ["--output-ci", "--export-baseline"])
def test_compare_that_cannot_write_its_output_after_the_verdict_exits_2_not_1(tmp_path, monkeypatch, small_disk, option):
    """`compare` exits 1 for a regression; a full disk at its --output-ci or --export-baseline,
    met after the verdict was printed, reached the root group's OSError handler and exited 1
    too, so CI read "a regression" where the comparison had passed. The other output is still
    written (the first failure used to end the command before it)."""
    from pathlib import Path

    from typer.testing import CliRunner

    from devicefit.cli import app
    from devicefit.ingest import ingest_file
    from devicefit.paths import DataPaths
    from devicefit.pipeline import load_results

    landing = Path(__file__).resolve().parents[2] / "benchmarks" / "datasets" / "epyc-2c-run33" / "partition__cpu-245a6e58dfb9__bert-tiny.json"
    paths = DataPaths(tmp_path / "data")
    monkeypatch.setenv("DEVICEFIT_DATA_DIR", str(paths.root))
    ingest_file(landing, paths.raw)
    load_results(paths)
    stat = os.statvfs(small_disk)
    (small_disk / "filler").write_bytes(b"\0" * (stat.f_bavail * stat.f_frsize))
    target = small_disk / "out.file"
    other, elsewhere = next(o for o in ("--output-ci", "--export-baseline") if o != option), tmp_path / "other.file"
    out = CliRunner().invoke(app, ["compare", "--baseline", str(landing), option, str(target), other, str(elsewhere)])
    assert out.exit_code == 2, out.output
    text = " ".join(out.output.split())
    assert f"{option} {target} was not written: No space left on device" in text
    assert "the comparison above is pass" in text and not target.exists()
    assert elsewhere.stat().st_size > 0 and f"{elsewhere}" in text  # the other output is still written, and said


@pytest.mark.parametrize("option", ["--output-ci", "--json"])
def test_benchmark_that_cannot_write_its_output_after_the_sweep_exits_2_not_1(tmp_path, monkeypatch, small_disk, option):
    """`benchmark` exits 1 when a config failed or regressed; a full disk at its --output-ci or
    --json, met after the sweep, reached the root group's OSError handler and exited 1 too. Now
    it is said, the other outputs are still written (here --database), and the exit is 2."""
    from typer.testing import CliRunner

    from devicefit.cli import app

    monkeypatch.setenv("DEVICEFIT_DATA_DIR", str(tmp_path / "data"))
    stat = os.statvfs(small_disk)
    (small_disk / "filler").write_bytes(b"\0" * (stat.f_bavail * stat.f_frsize))
    target = small_disk / "out.json"
    database = tmp_path / "rows.duckdb"
    out = CliRunner().invoke(app, ["benchmark", "--model", "bert-tiny", "--timing", "quick", option, str(target),
                                   "--database", str(database)])
    assert out.exit_code == 2, out.output
    text = " ".join(out.output.split())
    assert f"{option} {target} was not written: No space left on device" in text
    assert "the table above holds the 1 rows measured (0 failed)" in text and "stored 1 rows in" in text
    assert not target.exists()
