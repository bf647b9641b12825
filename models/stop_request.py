"""A stop request (SIGINT, SIGTERM) that loops of independent tasks look at between tasks.

A signal handler that raises reaches only the code running at that moment, and code that
carries on past a failed task (a cache warm-up counts a failure as the caller's to meet later)
or catches broadly (a task listing that logs what it cannot resolve) can swallow it: `devicefit
run` then warmed every cache before it stopped, about 90 s of a fresh `make run` after a
SIGTERM. The process that handles the signals installs a check here (pipelines.run_watch); such
loops call `raise_if_requested()` before each task, which raises the handler's own exception."""
from __future__ import annotations

import contextlib
from typing import Callable, Iterator

_checks: list[Callable[[], None]] = []


@contextlib.contextmanager
def checked_by(check: Callable[[], None]) -> Iterator[None]:
    """While the block runs, `raise_if_requested()` calls `check` (which raises when a stop was asked)."""
    _checks.append(check)
    try:
        yield
    finally:
        if check in _checks:
            _checks.remove(check)


def raise_if_requested() -> None:
    """Raise the installed check's exception if a stop was asked; nothing where none is installed."""
    for check in list(_checks):
        check()
