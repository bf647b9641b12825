"""A fork server for measurement workers: one process per sweeping process imports python's,
torch's and transformers' modules once, then forks a fresh worker for each (model, backend,
device) group. A worker started from scratch spends about 4 s on those imports before its first
config (24 groups in `make run`: a minute and a half); a forked one starts in a fraction of a
second, with nothing measured yet in it (no thread pool has run, no model is loaded).

Protocol, over a SOCK_SEQPACKET socket pair (one message per request, its file descriptors
passed with SCM_RIGHTS):
  ready                                      the server, once its imports are done
  {"op": "fork", "env": {...}} + 4 fds       stdin, stdout, stderr and lifeline of the worker
      -> {"pid": N}
  {"op": "wait", "pid": N}                   -> {"returncode": int | None} (Popen's convention;
                                                None while it runs: the server never blocks)
The worker is its own session leader (so a kill of its group reaches it alone), reads the
parent's lifeline like any worker, and the server exits when its socket closes (the parent
is gone). Isolation is unchanged: each config group still runs in a process of its own.
Settings that a library reads when it is imported (OMP_NUM_THREADS, ONEDNN_MAX_CPU_ISA,
ATEN_CPU_CAPABILITY) are the server's for every forked worker: a worker that needs others must
be started as a fresh interpreter (DEVICEFIT_NO_FORK_SERVER, or a server of its own).
"""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

READY = b"ready"
MAX_MESSAGE = 1 << 16
# Modules every worker imports: the server imports them once, before it forks anyone.
PRELOADED = ("torch", "transformers", "benchmark_runners.measure", "benchmark_runners.worker")


def _returncode(status: int) -> int:
    return -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)


def _run_worker(sock: socket.socket, fds: list[int], env: dict[str, str]) -> None:
    """In the forked child: become the worker. Never returns."""
    status = 1
    try:
        sock.close()
        os.setsid()
        stdin_fd, stdout_fd, stderr_fd, lifeline_fd = fds
        for fd, target in ((stdin_fd, 0), (stdout_fd, 1), (stderr_fd, 2)):
            os.dup2(fd, target)
            os.close(fd)
        os.environ.update(env)
        from benchmark_runners import worker
        from models.lifeline import LIFELINE_ENV

        os.environ[LIFELINE_ENV] = str(lifeline_fd)
        status = worker.main()
    except BaseException:  # noqa: BLE001 - reported on the worker's stderr, which the sweep reads
        import traceback

        traceback.print_exc()
    finally:
        try:
            sys.stderr.flush()
        finally:
            os._exit(status)


def serve(sock_fd: int) -> int:
    sock = socket.socket(fileno=sock_fd)
    import importlib

    for name in PRELOADED:
        importlib.import_module(name)
    from transformers import PreTrainedModel  # noqa: F401 - modeling_utils, which every model class needs

    from benchmark_runners.worker import freeze_imports

    # Frozen before any fork: a child's collections then never touch the server's objects (no
    # copy-on-write of their pages), and each walks only what the worker made itself.
    freeze_imports()
    sock.send(READY)
    while True:
        try:
            message, fds, _flags, _addr = socket.recv_fds(sock, MAX_MESSAGE, 4)
        except OSError:
            return 0
        if not message:
            return 0  # the parent is gone
        request = json.loads(message)
        if request["op"] == "fork":
            pid = os.fork()
            if pid == 0:
                _run_worker(sock, fds, request["env"])
            for fd in fds:
                os.close(fd)
            sock.send(json.dumps({"pid": pid}).encode())
        elif request["op"] == "wait":
            try:
                done, status = os.waitpid(request["pid"], os.WNOHANG)
                reply = {"returncode": _returncode(status) if done else None}
            except ChildProcessError:
                reply = {"returncode": None, "error": "no such worker"}
            sock.send(json.dumps(reply).encode())


# The returncode of a forked worker that ended after its server was lost: its exit status went
# to whoever reaped the orphan. Outside 0-255 and not a signal's negative, so never a real one.
UNKNOWN_RETURNCODE = 256


def _orphan_returncode(pid: int) -> int | None:
    """None while the worker still runs (its server gone, it was re-parented), else
    UNKNOWN_RETURNCODE. A zombie has ended: its new parent has yet to reap it."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            state = stat.read().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        return UNKNOWN_RETURNCODE
    return UNKNOWN_RETURNCODE if state in (b"Z", b"X") else None


class ForkedProcess:
    """The parts of `subprocess.Popen` the sweep uses, for a worker the server forked: its
    pipes, pid, args, poll, wait, returncode. Should the server die (an out-of-memory kill),
    the worker lives on, re-parented: poll and wait then watch its pid, and its returncode is
    UNKNOWN_RETURNCODE once it ends; the server records why it was lost (ForkServer.lost)."""

    def __init__(self, server: "ForkServer", pid: int, stdin, stdout, args: list[str]):
        self.server, self.pid, self.stdin, self.stdout, self.args = server, pid, stdin, stdout, args
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                self.returncode = self.server.wait(self.pid, block=False)
            except RuntimeError:  # _ask turns every failure into one, recording why
                self.returncode = _orphan_returncode(self.pid)
        return self.returncode

    def wait(self) -> int:
        if self.returncode is None:
            try:
                self.returncode = self.server.wait(self.pid, block=True)
            except RuntimeError:  # _ask turns every failure into one, recording why
                while (code := _orphan_returncode(self.pid)) is None:
                    time.sleep(0.01)
                self.returncode = code
        return self.returncode


class ForkServer:
    """The parent's handle on its fork server. `fork` blocks until the server's imports are
    done (the first time: as long as a worker's own start); a server that dies or never gets
    ready raises RuntimeError and the sweep starts workers the plain way."""

    def __init__(self, python: str, env: dict[str, str], ready_timeout_s: float):
        self.python, self.ready_timeout_s = python, ready_timeout_s
        self.sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.stderr = tempfile.TemporaryFile()
        self.lock = threading.Lock()
        try:
            self.proc = subprocess.Popen([python, "-m", "benchmark_runners.zygote", str(theirs.fileno())],
                                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=self.stderr,
                                         env=env, pass_fds=(theirs.fileno(),), start_new_session=True)
        finally:
            theirs.close()
        self.ready = False
        self.lost: str | None = None  # why the server stopped answering, once it has

    def _await_ready(self) -> None:
        if self.ready:
            return
        self.sock.settimeout(self.ready_timeout_s)
        try:
            message = self.sock.recv(MAX_MESSAGE)
        except (socket.timeout, OSError) as exc:
            raise RuntimeError(f"fork server not ready after {self.ready_timeout_s:g} s ({exc})") from None
        finally:
            self.sock.settimeout(None)
        if message != READY:
            self.stderr.seek(0)
            raise RuntimeError(f"fork server exited while importing: {self.stderr.read().decode(errors='replace')[-500:]}")
        self.ready = True

    def _ask(self, request: dict[str, Any], fds: list[int] = ()) -> dict[str, Any]:
        if self.lost:
            raise RuntimeError(self.lost)
        try:
            with self.lock:
                self._await_ready()
                socket.send_fds(self.sock, [json.dumps(request).encode()], list(fds))
                reply = self.sock.recv(MAX_MESSAGE)
            if not reply:
                raise RuntimeError("fork server exited")
            return json.loads(reply)
        except (RuntimeError, OSError, ValueError) as exc:
            self.lost = f"fork server lost ({type(exc).__name__}: {exc})"
            raise RuntimeError(self.lost) from exc

    def fork(self, env: dict[str, str], stderr_fd: int, lifeline_fd: int) -> ForkedProcess:
        stdin_r, stdin_w = os.pipe()
        stdout_r, stdout_w = os.pipe()
        try:
            pid = self._ask({"op": "fork", "env": env}, [stdin_r, stdout_w, stderr_fd, lifeline_fd])["pid"]
        except BaseException:
            for fd in (stdin_w, stdout_r):
                os.close(fd)
            raise
        finally:
            os.close(stdin_r)
            os.close(stdout_w)
        return ForkedProcess(self, pid, os.fdopen(stdin_w, "wb"), os.fdopen(stdout_r, "rb"),
                             [self.python, "-m", "benchmark_runners.worker"])

    def wait(self, pid: int, block: bool) -> int | None:
        while True:
            reply = self._ask({"op": "wait", "pid": pid})
            if reply["returncode"] is not None or not block:
                return reply["returncode"]
            time.sleep(0.01)  # a killed or finishing worker is gone within milliseconds

    def close(self) -> None:
        self.sock.close()  # the server sees end of file and exits
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.stderr.close()


if __name__ == "__main__":
    sys.exit(serve(int(sys.argv[1])))
