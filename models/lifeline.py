"""A child process that ends when the process that started it dies, however it dies.

A child started in a session of its own (so that a stop reaches what it starts) is not killed
with its parent: a `devicefit run` killed with SIGKILL (the OOM killer, a CI timeout, `kill -9`)
left its helper computing the selection map's traces on a core for up to a minute, beside the
next run's measurements. Here the parent holds the write end of a pipe that it alone holds (not
inheritable, so no other child keeps it open); the child blocks reading the other end in a daemon
thread (no polling, no CPU), and end of file means the parent is gone. Portable to any POSIX
system, unlike Linux's PR_SET_PDEATHSIG, and bound to the process, not to the thread that forked.
"""
from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import threading
from typing import Callable

# The environment variable naming the child's end of the pipe.
LIFELINE_ENV = "DEVICEFIT_LIFELINE_FD"


def open_lifeline() -> tuple[int, int]:
    """(read end for the child: pass it with `pass_fds` and name it in LIFELINE_ENV; write end
    this process keeps, closing it when the child is stopped)."""
    read, write = os.pipe()  # both non-inheritable (PEP 446): the child gets the read end by pass_fds only
    if read <= 2:  # a parent started with a standard stream closed: the child's own stdin/stdout/stderr would replace it
        moved = fcntl.fcntl(read, fcntl.F_DUPFD_CLOEXEC, 3)
        os.close(read)
        read = moved
    return read, write


def follow_parent(exit_code: int, on_orphan: Callable[[], None] | None = None) -> None:
    """In the child: once the parent that set LIFELINE_ENV is gone (nothing is left to read what
    this process would report), run `on_orphan` (the parent's cleanup it can no longer do),
    then end: where this process leads its own process group (started in a session of its own),
    the whole group, so that what it started (an exporter's subprocess) does not run on either;
    else itself, with `exit_code`. A process started without a lifeline is left alone."""
    fd = os.environ.pop(LIFELINE_ENV, None)
    if fd is None or not fd.isdigit():
        return

    def wait_for_parent_exit() -> None:
        try:
            while os.read(int(fd), 1):
                pass
        except OSError:
            pass
        try:
            if on_orphan is not None:
                on_orphan()
        finally:
            if os.getpgrp() == os.getpid():
                with contextlib.suppress(OSError):
                    os.killpg(os.getpid(), signal.SIGKILL)  # this process too
            os._exit(exit_code)

    threading.Thread(target=wait_for_parent_exit, name="lifeline", daemon=True).start()
