"""Opening the store, migrating it, and saying whose fault a failure is: the machine's
(StoreError: disk full, lock held, corrupt file) or the caller's."""
from __future__ import annotations

from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterator, Union

import duckdb

from devicefit.errors import DevicefitError
from devicefit.store.schema import MIGRATIONS, SCHEMA_VERSION
from models.errors import is_disk_full


class StoreError(DevicefitError, RuntimeError):
    """A database that is missing, too new, locked, corrupt, or on a full disk, said in words."""
    http_status = 503


# Insert failures caused by a row's content (the file is at fault: quarantine it), as opposed to
# the machine's (disk full, I/O error, a lock: the file is fine, retry later).
# Only DuckDB's own verdicts on a row: a Python error here is a bug to see, not a file to hide.
DATA_ERRORS = (duckdb.DataError, duckdb.IntegrityError, duckdb.InvalidInputException)
_LOCK_WORDS = ("conflicting lock", "could not set lock", "lock on file")
_CORRUPT_WORDS = ("not a valid duckdb database", "could not read enough bytes", "corrupt", "checksum", "invalid magic",
                  "unrecognized file format", "serialization error")


def _write_failure(path: str, exc: BaseException, doing: str) -> StoreError:
    """The machine's reason a write failed, in words, with the disk being full said first."""
    if is_disk_full(exc):
        return StoreError(f"cannot {doing} {path}: disk full (no space left on the device holding it; "
                          f"nothing was half-written, free space and run it again): {exc}")
    return StoreError(f"cannot {doing} {path}: {type(exc).__name__}: {exc}")


def _rollback(con: duckdb.DuckDBPyConnection) -> None:
    """Roll back if a transaction is still active. A failed COMMIT or a fatal I/O error already
    ended it; DuckDB then says "no transaction is active", which must not mask the real cause."""
    try:
        con.execute("ROLLBACK")
    except duckdb.Error:
        pass


@contextmanager
def transaction(con: duckdb.DuckDBPyConnection, doing: str) -> Iterator[duckdb.DuckDBPyConnection]:
    """All or nothing: what the block writes is committed together, or rolled back on any error
    (a disk-full or I/O failure said as the machine's, `doing` naming what was being done)."""
    con.execute("BEGIN TRANSACTION")
    try:
        yield con
        con.execute("COMMIT")
    except BaseException as exc:
        _rollback(con)
        if isinstance(exc, (duckdb.IOException, OSError)):
            raise _write_failure(database_file(con), exc, doing) from exc
        raise


def database_file(con: duckdb.DuckDBPyConnection) -> str:
    try:
        row = con.execute("SELECT path FROM duckdb_databases() WHERE database_name = current_database()").fetchone()
        return row[0] if row and row[0] else "the database"
    except duckdb.Error:
        return "the database"


DUCKDB_MAGIC = b"DUCK"  # bytes 8-12 of every DuckDB database file (its main header)


def is_duckdb_file(path: Path) -> bool:
    """Whether the file at `path` starts with a DuckDB database's main header (an empty file is
    not one: DuckDB refuses to open it)."""
    with Path(path).open("rb") as fh:
        return fh.read(12)[8:12] == DUCKDB_MAGIC


def _now() -> datetime:
    return datetime.now(timezone.utc).replace(tzinfo=None)


def connect(path: Path, read_only: bool = False) -> duckdb.DuckDBPyConnection:
    path = Path(path)
    if read_only and not path.is_file():
        raise StoreError(f"no database at {path}: run `devicefit db init` or materialize the pipeline first")
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        return duckdb.connect(str(path), read_only=read_only)
    except duckdb.Error as exc:
        raise open_failure(path, exc) from exc


#: Where a function reads or writes the store: a connection its caller holds (in the pipeline, one
#: from Dagster's DuckDBResource, which retries while another process holds the lock), or a path
#: it opens itself (the CLI, the tests) and closes when done.
Source = Union[Path, str, duckdb.DuckDBPyConnection]


@contextmanager
def opened(source: Source, read_only: bool = False) -> Iterator[duckdb.DuckDBPyConnection]:
    """The caller's connection, left open for it; or one opened on the path and closed after."""
    if not isinstance(source, (str, Path)):  # a connection (or a wrapper of one): the caller's
        yield source
        return
    con = connect(Path(source), read_only=read_only)
    try:
        yield con
    finally:
        con.close()


def close(con: duckdb.DuckDBPyConnection, path: Path | str, failed: bool) -> None:
    """Close (DuckDB checkpoints here). After a failure (`failed`), a failure to close must not
    hide the error that got here; after success, it is said as the machine's fault."""
    try:
        con.close()
    except Exception as exc:
        if not failed:
            raise StoreError(f"cannot close {path}" + (": disk full" if is_disk_full(exc) else "")
                             + f" ({exc}); what was committed is in its write-ahead log") from exc


def open_failure(path: Path, exc: BaseException) -> StoreError:
    """Why DuckDB would not open `path`: another process's lock, a corrupt or foreign file, a
    full disk, or something else, each said as such."""
    text = str(exc).lower()
    if any(w in text for w in _LOCK_WORDS):
        return StoreError(f"cannot open {path}: another process holds its lock (DuckDB allows one writing process "
                          f"at a time; wait for it to finish): {exc}")
    if any(w in text for w in _CORRUPT_WORDS):
        return StoreError(f"cannot open {path}: the file is corrupt or not a DuckDB database (restore it from a "
                          f"backup, or move it aside and rebuild it with `devicefit db init` and a load): {exc}")
    if is_disk_full(exc):
        return _write_failure(str(path), exc, "open")
    return StoreError(f"cannot open {path}: {type(exc).__name__}: {exc}")


def schema_version(con: duckdb.DuckDBPyConnection) -> int:
    exists = con.execute("SELECT count(*) FROM information_schema.tables WHERE table_name = 'schema_version'").fetchone()[0]
    if not exists:
        return 0
    return con.execute("SELECT coalesce(max(version), 0) FROM schema_version").fetchone()[0]


def migrate(con: duckdb.DuckDBPyConnection) -> list[int]:
    """Apply pending migrations; returns the versions applied. A newer database is refused."""
    current = schema_version(con)
    if current > SCHEMA_VERSION:
        raise StoreError(f"database schema version {current} is newer than this devicefit ({SCHEMA_VERSION}); upgrade devicefit")
    applied = []
    for version in range(current + 1, SCHEMA_VERSION + 1):
        con.execute("BEGIN TRANSACTION")
        try:
            for step in MIGRATIONS[version]:
                if callable(step):
                    step(con)
                else:
                    con.execute(step)
            con.execute("INSERT INTO schema_version VALUES (?, ?)", [version, _now()])
            con.execute("COMMIT")
        except BaseException as exc:
            _rollback(con)
            if isinstance(exc, (duckdb.Error, OSError)):
                raise _write_failure(database_file(con), exc, f"apply migration {version} to") from exc
            raise
        applied.append(version)
    return applied


def init_db(path: Path) -> list[int]:
    con = connect(path)
    try:
        return migrate(con)
    finally:
        con.close()
