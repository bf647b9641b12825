"""Issue 21 item 7: a data directory the CLI cannot write (read-only, or not a directory) ends
in one line naming the path and the OS's reason, exit code 1, and no traceback."""
import json
import os
import subprocess
import sys

import pytest

from benchmark_runners.records import BenchmarkConfig, BenchmarkResult
from devicefit.results_io import results_document


def _document(tmp_path):
    row = BenchmarkResult.for_config(BenchmarkConfig(model="bert-tiny"), "run-ro", "2026-11-23T00:00:00+00:00", "skipped",
                                     "cuda is not available here: no GPU")
    path = tmp_path / "rows.json"
    path.write_text(json.dumps(results_document("run-ro", [row], {"platforms": {}})))
    return path


def _ingest(document, data_dir):
    env = dict(os.environ, DEVICEFIT_DATA_DIR=str(data_dir))
    return subprocess.run([sys.executable, "-m", "devicefit.cli", "ingest", str(document)], capture_output=True, text=True,
                          timeout=300, env=env)


def _assert_one_line_error(run, reason):
    assert run.returncode == 1, run.stdout + run.stderr
    assert "Traceback" not in run.stderr and reason in run.stderr
    assert len([ln for ln in run.stderr.splitlines() if ln.strip()]) == 1, run.stderr


def test_a_data_dir_under_a_file_is_one_line(tmp_path):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    _assert_one_line_error(_ingest(_document(tmp_path), blocker / "data"), "Not a directory")


def test_a_read_only_data_dir_is_one_line(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("mounting a read-only tmpfs needs root")
    mount_point = tmp_path / "ro"
    mount_point.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(mount_point)], capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        _assert_one_line_error(_ingest(_document(tmp_path), mount_point), "Read-only file system")
    finally:
        subprocess.run(["umount", str(mount_point)], check=False)


def test_benchmark_refuses_outputs_and_baselines_it_could_not_use_before_measuring(tmp_path, monkeypatch):
    """`benchmark --json DIR` measured every config, then failed at the end naming a temporary
    file ("Is a directory: .DIR.x1y2.tmp") and the rows were lost; an unreadable --compare-to
    baseline was named only after the whole sweep too. Each is refused before anything runs
    (found by a fault hunt, 2026-11-29)."""
    from typer.testing import CliRunner

    import benchmark_runners.hardware as hardware
    from devicefit.cli import app
    from devicefit.results_io import write_json_atomic

    def no_sweep(*_a, **_k):
        raise AssertionError("the sweep's preparations started before the bad option was refused")

    monkeypatch.setattr(hardware, "detect_hardware", no_sweep)
    monkeypatch.setenv("DEVICEFIT_DATA_DIR", str(tmp_path / "data"))
    directory, blocker, corrupt = tmp_path / "out", tmp_path / "file", tmp_path / "corrupt.json"
    directory.mkdir()
    blocker.write_text("")
    corrupt.write_text('{"results": ')
    for extra, message in ((["--json", str(directory)], f"--json {directory} is a directory"),
                           (["--database", str(corrupt)], f"--database {corrupt} is not a DuckDB store"),
                           (["--output-ci", str(blocker / "ci.json")], f"{blocker} is not a directory"),
                           (["--database", str(directory)], f"--database {directory} is a directory"),
                           (["--compare-to", str(corrupt)], f"baseline {corrupt} is unreadable"),
                           (["--compare-to", "no-such-run"], "there is no database to look up a run id in"),
                           (["--compare-to", "previous"], "baseline 'previous' needs the database"),
                           (["--compare-to", "previous", "--regression-alert", "nan"], "--regression-alert: the regression threshold"),
                           (["--json", str(tmp_path / "r.json"), "--output-ci", str(tmp_path / "r.json")],
                            "--json and --output-ci name the same file")):
        out = CliRunner().invoke(app, ["benchmark", "--model", "bert-tiny", *extra])
        assert out.exit_code == 2 and message in " ".join(out.output.split()), out.output
    with pytest.raises(IsADirectoryError, match=str(directory)):
        write_json_atomic(directory, {})


def test_the_cli_runs_with_its_standard_output_closed(tmp_path):
    """Started with stdout closed (`devicefit benchmark --json F >&-` from cron), Python's
    sys.stdout is None and building the console at import was an AttributeError traceback for
    every command (found by a fault hunt, 2026-11-29)."""
    env = dict(os.environ, DEVICEFIT_DATA_DIR=str(tmp_path / "data"))
    run = subprocess.run(["bash", "-c", f"exec {sys.executable} -m devicefit.cli models >&-"], capture_output=True, text=True,
                         timeout=300, env=env)
    assert run.returncode == 0 and "Traceback" not in run.stderr, run.stderr[-2000:]
    script = "import sys; sys.argv = ['devicefit', 'models']; from pipelines.cli import main; main()"  # the console script's exit
    run = subprocess.run(["bash", "-c", f'exec {sys.executable} -c "{script}" >&-'], capture_output=True, text=True,
                         timeout=300, env=env)
    assert run.returncode == 0 and "Traceback" not in run.stderr, run.stderr[-2000:]


@pytest.mark.parametrize("writer", ["write_analysis_csv", "write_recommendations"])
def test_a_report_output_that_is_a_directory_is_named_and_leaves_no_stray_file(tmp_path, writer):
    """`devicefit analyze --output DIR` wrote the CSV to `.DIR.tmp` beside the directory, failed to
    rename it over the directory naming that temp file, and left it there (found by a fault hunt)."""
    from devicefit.reports import analysis

    target = tmp_path / "out"
    target.mkdir()
    with pytest.raises(IsADirectoryError, match=str(target)):
        getattr(analysis, writer)([], target)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"] and not any(target.iterdir())
    written = getattr(analysis, writer)([], target / "file")
    assert written.is_file() and sorted(p.name for p in target.iterdir()) == ["file"]


def test_written_outputs_are_readable_as_the_umask_allows(tmp_path):
    """mkstemp's temporary file is 0600, so every output written through it (the landing files,
    the API's snapshot, the reports) was readable by its owner only, whatever the umask: a server
    run by another user could not read them."""
    import os
    import stat

    from devicefit.results_io import write_json_atomic

    previous = os.umask(0o022)
    try:
        write_json_atomic(tmp_path / "open.json", {"a": 1})
        os.umask(0o077)
        write_json_atomic(tmp_path / "private.json", {"a": 1})
    finally:
        os.umask(previous)
    assert stat.S_IMODE((tmp_path / "open.json").stat().st_mode) == 0o644
    assert stat.S_IMODE((tmp_path / "private.json").stat().st_mode) == 0o600
