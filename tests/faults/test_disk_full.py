"""Issue 21 item 7: a load onto a full disk says the disk is full (not "cannot rollback - no
transaction is active"), leaves every source whole or absent, quarantines nothing (the files are
fine), and completes once space is freed. Needs a real full disk: a 2 MiB tmpfs, mounted when the
test runs as root and mount works, skipped with the reason otherwise."""
import errno

import pytest

from devicefit import store
from devicefit.landing import load_landing_files, write_landing
from tests.pipelines.test_store import _doc, _row

ROWS_PER_SOURCE = 150
SOURCES = ("partition:cpu|m1", "partition:cpu|m2", "partition:cpu|m3")


def _fill(disk) -> None:
    with open(disk / "filler", "wb") as fh:
        try:
            while True:
                fh.write(b"\0" * 65536)
                fh.flush()
        except OSError as exc:
            assert exc.errno == errno.ENOSPC


def _stored(db) -> tuple[dict[str, int], dict[str, int]]:
    con = store.connect(db, read_only=True)
    try:
        measured = dict(con.execute("SELECT source_key, count(*) FROM measurements GROUP BY 1").fetchall())
        declared = dict(con.execute("SELECT source_key, rows FROM sources").fetchall())
        return measured, declared
    finally:
        con.close()


def test_a_full_disk_is_named_nothing_is_half_written_and_freeing_space_completes_the_load(tmp_path, small_disk):
    db, raw = small_disk / "devicefit.duckdb", tmp_path / "raw"  # the landing files are elsewhere: only the store is full
    store.init_db(db)
    for i, key in enumerate(SOURCES):
        write_landing(raw, key, _doc([_row(run_id=f"run{i}", batch=b) for b in range(1, ROWS_PER_SOURCE + 1)]))
    _fill(small_disk)

    with pytest.raises(store.StoreError) as caught:
        load_landing_files(db, raw)
    message = str(caught.value)
    assert "disk full" in message and str(db) in message, message
    assert "no transaction is active" not in message.split(": disk full")[0]
    assert sorted(p.name for p in raw.iterdir()) == sorted(f"{key.replace(':', '__').replace('|', '__')}.json" for key in SOURCES)

    (small_disk / "filler").unlink()
    measured, declared = _stored(db)
    assert all(measured.get(key, 0) in (0, ROWS_PER_SOURCE) for key in SOURCES), measured  # whole or absent
    assert measured == {k: n for k, n in declared.items() if n}

    report = load_landing_files(db, raw)
    assert report.quarantined == []
    measured, declared = _stored(db)
    assert measured == declared == {key: ROWS_PER_SOURCE for key in SOURCES}


def test_a_new_database_on_a_full_disk_is_named_as_such(small_disk):
    _fill(small_disk)
    with pytest.raises(store.StoreError, match="disk full"):
        store.init_db(small_disk / "new.duckdb")
