"""A throwaway PostgreSQL server for the fleet tests: initdb in a temp directory, a server on
127.0.0.1 on a free port (password auth, as a fleet's would be), one database, its URL; stopped
and removed afterwards.

The binaries come from Debian's `postgresql` (/usr/lib/postgresql/<version>/bin, the newest), or
DEVICEFIT_PG_BINDIR, or PATH. Nothing is installed here (that is `make fleet-deps`): without them
the tests skip and say so. PostgreSQL refuses to run as root, so under root the server runs as
the `postgres` user (the package creates it), which owns the temp directory."""
from __future__ import annotations

import os
import pwd
import re
import secrets
import shutil
import socket
import subprocess
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest

SERVER_USER = "postgres"
INSTALL_HINT = "run `make fleet-deps` (installs Debian's postgresql) or set DEVICEFIT_PG_BINDIR to a PostgreSQL bin directory"


class PostgresUnavailable(Exception):
    """No server can be started here; the message says why and what to do."""


def _version_key(path: Path) -> tuple[int, ...]:
    return tuple(int(n) for n in re.findall(r"\d+", path.parent.parent.name)) or (0,)


def find_bindir() -> Path:
    """The directory holding initdb, pg_ctl and createdb."""
    wanted = ("initdb", "pg_ctl", "createdb")
    candidates = []
    if os.environ.get("DEVICEFIT_PG_BINDIR"):
        candidates.append(Path(os.environ["DEVICEFIT_PG_BINDIR"]))
    candidates += [p.parent for p in sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"), key=_version_key, reverse=True)]
    if shutil.which("initdb"):
        candidates.append(Path(shutil.which("initdb")).resolve().parent)
    for bindir in candidates:
        if all(os.access(bindir / name, os.X_OK) for name in wanted):
            return bindir
    raise PostgresUnavailable(f"no PostgreSQL server binaries ({', '.join(wanted)}) found: {INSTALL_HINT}")


def _server_user() -> pwd.struct_passwd | None:
    """Whom the server runs as: None for this process's user, the `postgres` user under root."""
    if os.geteuid() != 0:
        return None
    try:
        return pwd.getpwnam(SERVER_USER)
    except KeyError:
        raise PostgresUnavailable(f"running as root and there is no {SERVER_USER!r} user to run the server as (PostgreSQL refuses root): "
                                  f"{INSTALL_HINT}") from None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run(cmd: list[str], user: pwd.struct_passwd | None, env: dict[str, str], timeout: float = 120) -> None:
    kwargs = {"user": user.pw_uid, "group": user.pw_gid, "extra_groups": []} if user else {}
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout, **kwargs)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {out.returncode}:\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}")


@contextmanager
def running_postgres(db_name: str = "dagster", username: str = "devicefit") -> Iterator[str]:
    """Start a server, create `db_name`, yield postgresql://username:password@127.0.0.1:port/db_name;
    stop the server and remove its directory on the way out."""
    bindir = find_bindir()
    user = _server_user()
    root = Path(tempfile.mkdtemp(prefix="devicefit-pg-"))
    data, sockets, log = root / "data", root / "sockets", root / "server.log"
    password = secrets.token_hex(16)
    (root / "pwfile").write_text(password + "\n")
    sockets.mkdir()
    if user:
        for path in (root, sockets, root / "pwfile"):
            os.chown(path, user.pw_uid, user.pw_gid)
    # The server's environment: nothing of ours (PG* variables would steer initdb and pg_ctl).
    server_env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(root), "LC_ALL": "C", "LANG": "C"}
    started = False
    try:
        _run([str(bindir / "initdb"), "-D", str(data), "-U", username, f"--pwfile={root / 'pwfile'}", "--auth=scram-sha-256",
              "--encoding=UTF8", "--no-locale", "--no-sync"], user, server_env)
        for attempt in range(3):  # the free port may be taken between choosing and binding it
            port = _free_port()
            options = f"-h 127.0.0.1 -p {port} -k {sockets} -c fsync=off"
            try:
                _run([str(bindir / "pg_ctl"), "-D", str(data), "-l", str(log), "-o", options, "-w", "-t", "60", "start"], user, server_env)
                started = True
                break
            except RuntimeError:
                if attempt == 2:
                    raise RuntimeError(f"PostgreSQL did not start; its log:\n{log.read_text()[-3000:] if log.exists() else '(none)'}") from None
        client_env = {**server_env, "PGPASSWORD": password}
        _run([str(bindir / "createdb"), "-h", "127.0.0.1", "-p", str(port), "-U", username, db_name], None, client_env)
        yield f"postgresql://{username}:{password}@127.0.0.1:{port}/{db_name}"
    finally:
        if started:
            try:
                _run([str(bindir / "pg_ctl"), "-D", str(data), "-m", "fast", "-w", "-t", "60", "stop"], user, server_env)
            except (RuntimeError, subprocess.TimeoutExpired):
                _run([str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop"], user, server_env)
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def postgres_url() -> Iterator[str]:
    """A running throwaway server's database URL (module-scoped); skips where no server can run."""
    try:
        find_bindir()
        _server_user()
    except PostgresUnavailable as exc:
        pytest.skip(str(exc))
    with running_postgres() as url:
        yield url
