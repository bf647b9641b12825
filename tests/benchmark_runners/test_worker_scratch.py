"""The worker's scratch directory (benchmark_runners.paths.WORKER_SCRATCH_ENV): an orphaned worker
removes it, so it must only ever be a directory the sweep made, never one the variable names."""
from __future__ import annotations

from benchmark_runners.paths import WORKER_SCRATCH_ENV, WORKER_SCRATCH_PREFIX, worker_scratch


def test_only_a_directory_the_sweep_made_is_a_workers_scratch(monkeypatch, tmp_path):
    made = tmp_path / f"{WORKER_SCRATCH_PREFIX}abc123"
    made.mkdir()
    monkeypatch.setenv(WORKER_SCRATCH_ENV, str(made))
    assert worker_scratch() == made
    for named in (tmp_path, tmp_path / "home", "/", f"{made}-gone"):  # a user's directory, the root, a missing one
        if named == tmp_path / "home":
            named.mkdir()
        monkeypatch.setenv(WORKER_SCRATCH_ENV, str(named))
        assert worker_scratch() is None
    monkeypatch.delenv(WORKER_SCRATCH_ENV)
    assert worker_scratch() is None
