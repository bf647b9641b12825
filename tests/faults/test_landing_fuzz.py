"""Property-based fuzzing (hypothesis) of landing files and optimum-benchmark output, issue 21.

The properties: every input either loads or is quarantined/refused with a reason naming the
problem (never a traceback, never a blocked load); the good files beside it still load; and the
store is never half-written: its row count is exactly the good files' rows plus the fuzzed
file's rows if (and only if) it loaded. Mutations start from a real valid row and break it the
ways a careless or hostile writer would: wrong types, huge integers, NaN/inf, bad timestamps,
booleans for numbers, lone surrogates, nested junk.
"""
import copy
import itertools
import json
import math
import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from devicefit import store
from devicefit.ingest import ingest_file
from devicefit.landing import LandingFileError, load_landing_files, read_document, write_landing
from devicefit.paths import DataPaths
from tests.pipelines.test_ingest import optimum_documents, write_optimum_pair
from tests.pipelines.test_store import _doc, _row

# Store-level properties run many examples against one in-memory store (milliseconds each);
# the whole-file property opens and closes a database per example, so it runs fewer.
FUZZ = settings(max_examples=100, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
FUZZ_FILES = settings(FUZZ, max_examples=25)
SCRATCH = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None  # no fsync cost where there is a RAM disk
_keys = itertools.count()


@pytest.fixture(scope="module")
def con():
    con = store.connect(Path(":memory:"))
    store.migrate(con)
    yield con
    con.close()


def _counts(con) -> tuple[int, int]:
    return (con.execute("SELECT count(*) FROM measurements").fetchone()[0],
            con.execute("SELECT coalesce(sum(rows), 0) FROM sources").fetchone()[0])

junk_scalars = st.one_of(
    st.none(), st.booleans(),
    st.integers(min_value=-2**70, max_value=2**70),
    st.sampled_from([0, -1, 2**31 - 1, 2**31, -2**31 - 1, 2**63 - 1, 2**63, 2**64, 10**400]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.sampled_from(["", "\ud800", "soon", "1", "NaN", "2026-11-22 around noon", "2026-13-45T00:00:00",
                     "0001-01-01T00:00:00+05:00", "9999-12-31T23:59:59-05:00", "2026-W01-1"]),
)
junk = st.recursive(junk_scalars, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                          st.dictionaries(st.text(max_size=6), inner, max_size=3)),
                    max_leaves=8)

ROW = _row()
# Where a mutation lands: a top-level field, or a nested key the store reads into its own column.
ROW_PATHS = [(k,) for k in ROW] + [
    ("input", "dims", "seq_length"), ("input", "dims"), ("environment", "hostname"), ("environment", "git"),
    ("environment", "git", "dirty"), ("environment", "git", "commit"), ("environment", "versions"),
    ("samples_ms", 0), ("phase_samples_ms", "forward"), ("unknown_field",),
]


def _set(target, path, value):
    for key in path[:-1]:
        if isinstance(target, dict):
            target = target.setdefault(key, {})
        elif isinstance(target, list) and isinstance(key, int) and key < len(target):
            target = target[key]
        else:
            return
        if not isinstance(target, (dict, list)):
            return
    last = path[-1]
    if isinstance(target, dict) and not isinstance(last, int):
        target[last] = value
    elif isinstance(target, list) and isinstance(last, int) and last < len(target):
        target[last] = value


@st.composite
def mutated_rows(draw):
    row = copy.deepcopy(ROW)
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        _set(row, draw(st.sampled_from(ROW_PATHS)), draw(junk))
    return row


def _write(path: Path, document) -> None:
    """Written as any process might write it (NaN and Infinity included), without validation."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document))


def _stored(db: Path) -> tuple[int, int, dict[str, int]]:
    con = store.connect(db, read_only=True)
    try:
        total = con.execute("SELECT count(*) FROM measurements").fetchone()[0]
        by_source = dict(con.execute("SELECT source_key, count(*) FROM measurements GROUP BY 1").fetchall())
        declared = con.execute("SELECT coalesce(sum(rows), 0) FROM sources").fetchone()[0]
        return total, declared, by_source
    finally:
        con.close()


def _fuzzed_document(rows, top, junk_value, tag) -> dict:
    for i, row in enumerate(rows):  # distinct natural keys per example, unless the fuzz broke them
        if isinstance(row.get("run_id"), str):
            row["run_id"] = f"{row['run_id']}-{tag}-{i}"
    document = _doc(rows)
    if top != "none":
        document[top] = junk_value
    return document


@FUZZ
@given(rows=st.lists(mutated_rows(), min_size=1, max_size=3), top=st.sampled_from(["none", "hardware", "results"]),
       junk_value=junk)
def test_the_store_holds_every_row_that_validates_and_none_of_a_file_that_does_not(con, rows, top, junk_value):
    n = next(_keys)
    document = json.loads(json.dumps(_fuzzed_document(rows, top, junk_value, n)))  # what a file would carry
    before = _counts(con)
    try:
        loaded = store.replace_source(con, f"partition:cpu|fuzz-{n}", "partition", document)
    except LandingFileError as exc:
        assert str(exc).strip() and f"fuzz-{n}" in str(exc)
        assert _counts(con) == before  # refused whole: not one row of it stored
        return
    stored = len(document["results"])  # the fuzz may have replaced the rows with a valid (empty) list
    assert loaded.rows == stored and loaded.duplicates == 0
    assert _counts(con) == (before[0] + stored, before[1] + stored)


@FUZZ_FILES
@given(rows=st.lists(mutated_rows(), min_size=1, max_size=3), top=st.sampled_from(["none", "hardware", "results"]),
       junk_value=junk)
def test_a_fuzzed_landing_file_loads_or_is_quarantined_and_never_blocks_the_rest(rows, top, junk_value):
    document = {**_fuzzed_document(rows, top, junk_value, "f"), "source_key": "partition:cpu|m-fuzz"}
    with tempfile.TemporaryDirectory(dir=SCRATCH) as tmp:
        paths = DataPaths(Path(tmp))
        write_landing(paths.raw, "partition:cpu|a-good", _doc([_row(run_id="good-a")]))
        _write(paths.raw / "partition__cpu__m-fuzz.json", document)
        write_landing(paths.raw, "partition:cpu|z-good", _doc([_row(run_id="good-z"), _row("int8", run_id="good-z")]))
        report = load_landing_files(paths.database, paths.raw)  # must not raise, whatever the file holds
        loaded = dict(report.loaded)
        assert loaded["partition:cpu|a-good"] == 1 and loaded["partition:cpu|z-good"] == 2
        quarantined = dict(report.quarantined)
        if "partition:cpu|m-fuzz" in loaded:
            assert "partition__cpu__m-fuzz.json" not in quarantined
            fuzz_rows = loaded["partition:cpu|m-fuzz"]
            assert fuzz_rows == len(document["results"])
        else:
            reason = quarantined["partition__cpu__m-fuzz.json"]
            assert reason.strip() and "m-fuzz" in reason  # names the file, says why
            assert (paths.raw / "quarantine" / "partition__cpu__m-fuzz.json.reason.txt").read_text().strip() == reason
            fuzz_rows = 0
        total, declared, by_source = _stored(paths.database)
        assert total == declared == 3 + fuzz_rows  # exactly the good rows: nothing half-written, nothing twice
        assert by_source.get("partition:cpu|m-fuzz", 0) == fuzz_rows


OPTIMUM_PATHS = [
    ("config", "backend"), ("config", "backend", "name"), ("config", "backend", "model"), ("config", "backend", "device"),
    ("config", "backend", "device_ids"), ("config", "backend", "torch_dtype"), ("config", "scenario"),
    ("config", "scenario", "name"), ("config", "scenario", "input_shapes"), ("config", "scenario", "input_shapes", "batch_size"),
    ("config", "scenario", "input_shapes", "sequence_length"), ("config", "environment"), ("config", "environment", "gpu"),
    ("config", "environment", "gpu_vram_mb"), ("config", "environment", "cpu_ram_mb"), ("config", "environment", "hostname"),
    ("config", "environment", "transformers_version"),
    ("report", "forward"), ("report", "forward", "latency"), ("report", "forward", "latency", "values"),
    ("report", "forward", "latency", "values", 0), ("report", "forward", "latency", "unit"),
    ("report", "forward", "throughput"), ("report", "forward", "throughput", "value"), ("report", "forward", "memory"),
    ("report", "forward", "memory", "max_ram"), ("report", "forward", "memory", "max_allocated"),
    ("report", "load"), ("report", "load", "latency", "values"), ("report", "load", "latency", "values", 0),
]


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


@FUZZ
@given(mutations=st.lists(st.tuples(st.sampled_from(OPTIMUM_PATHS), junk), min_size=1, max_size=3))
def test_fuzzed_optimum_output_is_refused_with_a_reason_or_lands_and_loads(con, mutations):
    config, report = optimum_documents()
    pair = {"config": config, "report": report}
    for path, value in mutations:
        _set(pair[path[0]], path[1:], value)
    with tempfile.TemporaryDirectory(dir=SCRATCH) as tmp:
        source = write_optimum_pair(Path(tmp) / "pair", config, report)
        try:
            result = ingest_file(source, Path(tmp) / "raw")
        except LandingFileError as exc:
            assert str(exc).strip() and str(source) in str(exc)
            assert not list((Path(tmp) / "raw").glob("*.json"))  # nothing landed
            return
        # it landed, so every latency it took was a real, positive number (a boolean is not one)
        assert all(_is_number(v) and v > 0 for v in report["forward"]["latency"]["values"])
        document = read_document(result.landing_path)
    before = _counts(con)
    store.replace_source(con, f"{result.source_key}-{next(_keys)}", "ingest", document)  # what validated, loads
    added = 1 if before[0] == _counts(con)[0] - 1 else 0
    assert added == 1 or document["results"][0]["run_id"] in _run_ids(con)  # the same content twice is stored once


def _run_ids(con) -> set[str]:
    return {r[0] for r in con.execute("SELECT DISTINCT run_id FROM measurements").fetchall()}
