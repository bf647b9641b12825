"""Partitions by (device, model): a device id resolves to what measures it on this host (or is
refused by name when it is elsewhere), a profile is applied to every config and brings its own
probe, and a device partition replaces the kind-level partition that measured the same device,
never adding a second copy of its rows."""
import json
from dataclasses import replace

import pytest

from benchmark_runners.hardware import detect_hardware
from benchmark_runners.records import BenchmarkConfig
from devicefit import store
from devicefit.fleet.constraints import BadProfile
from devicefit.fleet.devices import DeviceUnavailable
from devicefit.fleet.partitions import BadPartitionKey, capped_isa_flags, dispatched_device_tags, resolve_local, split_partition_key
from devicefit.landing import LandingFileError, load_landing_files, write_landing
from devicefit.paths import DataPaths
from devicefit.pipeline import measure_partition
from devicefit.profiles import Selection, is_device_id
from devicefit.results_io import results_document
from tests.fleet.test_device_profiles import _row

INVENTORY = {"hostname": "h", "platforms": {
    "cpu": {"available": True, "devices": [{"index": 0, "name": "CPU", "logical_cores": 2, "isa_flags": ["avx2", "avx512f", "amx_bf16"],
                                            "fingerprint": "cpu-aaaaaaaaaaaa"}]},
    "openvino": {"available": True, "devices": [{"index": 0, "name": "CPU", "fingerprint": "openvino-bbbbbbbbbbbb"}]},
    "cuda": {"available": True, "devices": [{"index": 0, "name": "A100", "fingerprint": "cuda-cccccccccccc"},
                                            {"index": 1, "name": "H100", "fingerprint": "cuda-dddddddddddd"}]}}}


def test_a_device_id_resolves_to_its_backend_device_index_and_profile():
    plain = resolve_local("cpu-aaaaaaaaaaaa", INVENTORY)
    assert (plain.kind, plain.device, plain.profile.empty, plain.legacy_kind) == ("cpu", "cpu", True, "cpu")
    one = resolve_local("cpu-aaaaaaaaaaaa+t1", INVENTORY)
    assert one.device_id == "cpu-aaaaaaaaaaaa+t1" and one.profile.threads == 1 and one.legacy_kind is None
    assert resolve_local("cuda-dddddddddddd", INVENTORY).device == "cuda:1"  # the second GPU, by its own id
    assert resolve_local("openvino-bbbbbbbbbbbb", INVENTORY).device == "openvino:CPU"
    assert resolve_local("cpu", INVENTORY).device_id == "cpu-aaaaaaaaaaaa"  # a kind: this host's first one, as it is


@pytest.mark.parametrize("reference, error, words", [
    ("cpu-ffffffffffff", DeviceUnavailable, "not on this host"),  # another host's: its own worker measures it
    ("cpu-aaaaaaaaaaaa+t8", BadProfile, "8 threads on a device with 2"),
    ("openvino-bbbbbbbbbbbb+t1", BadProfile, "applies to cpu"),
    ("cpu-aaaaaaaaaaaa+sse9", BadPartitionKey, "not a constraint profile"),
    ("mps", DeviceUnavailable, "no mps device on this host"),
])
def test_a_device_this_host_cannot_measure_is_refused_by_name(reference, error, words):
    with pytest.raises(error, match=words):
        resolve_local(reference, INVENTORY)


def test_dispatched_partitions_are_tagged_by_the_physical_device_on_its_host():
    """One benchmark per physical device at a time: this host's CPU and its profiles share a tag,
    another host's GPU is tagged with its host (from its record), a device its worker added to the
    instance's partitions but the store has not registered yet is tagged from its id, and a
    device nobody serves is refused by name before anything is launched."""
    registered = [{"id": "cuda-eeeeeeeeeeee", "kind": "cuda", "host_fingerprint": "cpu-999999999999"}]
    tags = dispatched_device_tags(["cpu-aaaaaaaaaaaa|gpt2", "cpu-aaaaaaaaaaaa+t1|gpt2", "openvino-bbbbbbbbbbbb|gpt2",
                                   "cuda-eeeeeeeeeeee|gpt2", "cpu-777777777777+t1|gpt2"], INVENTORY, registered,
                                  {"cpu-777777777777+t1"})
    assert tags == {"cpu-aaaaaaaaaaaa|gpt2": "cpu@cpu-aaaaaaaaaaaa", "cpu-aaaaaaaaaaaa+t1|gpt2": "cpu@cpu-aaaaaaaaaaaa",
                    "openvino-bbbbbbbbbbbb|gpt2": "cpu@cpu-aaaaaaaaaaaa", "cuda-eeeeeeeeeeee|gpt2": "cuda@cpu-999999999999",
                    "cpu-777777777777+t1|gpt2": "cpu@cpu-777777777777"}
    with pytest.raises(DeviceUnavailable, match="cuda-ffffffffffff is neither on this host nor registered"):
        dispatched_device_tags(["cuda-ffffffffffff|gpt2"], INVENTORY, registered)


@pytest.mark.parametrize("key", ["bert-tiny", "|bert-tiny", "cpu-aaaaaaaaaaaa|", "a|b|c"])
def test_a_malformed_partition_key_is_refused_by_name(key):
    with pytest.raises(BadPartitionKey, match="is not a partition key"):
        split_partition_key(key)


def test_the_selection_takes_kinds_and_device_ids():
    assert is_device_id("cpu-aaaaaaaaaaaa+t1-avx2") and not is_device_id("cpu-zz") and not is_device_id("../etc|x")
    with pytest.raises(ValueError, match="unknown hardware ../x"):
        Selection(hardware=("../x",))
    selection = Selection(models=("bert-tiny",), hardware=("cpu", "cpu-aaaaaaaaaaaa+t1", "cuda", "cpu"))
    assert selection.partition_keys(INVENTORY) == ["cpu-aaaaaaaaaaaa|bert-tiny", "cpu-aaaaaaaaaaaa+t1|bert-tiny",
                                                   "cuda-cccccccccccc|bert-tiny"]
    assert Selection(models=("bert-tiny",)).device_ids(INVENTORY) == ["cpu-aaaaaaaaaaaa", "cuda-cccccccccccc", "openvino-bbbbbbbbbbbb"]


def test_an_isa_cap_hides_what_the_cpu_has_above_it():
    flags = ["avx2", "avx512f", "avx512_bf16", "amx_bf16"]
    assert capped_isa_flags(flags, "avx2") == ["avx2"]
    assert capped_isa_flags(flags, "avx512") == ["avx2", "avx512f", "avx512_bf16"]
    assert capped_isa_flags(flags, None) == flags


HARDWARE = {"hostname": "vm", "platforms": {"cpu": {"available": True, "devices": [{"name": "Xeon", "fingerprint": "cpu-abc"}]}}}


def _load(database, key, rows, **extra):
    with store.opened(database) as con:
        store.migrate(con)
        loaded = store.replace_source(con, key, "partition", {**results_document("r", rows, HARDWARE), **extra})
        held = dict(con.execute("SELECT source_key, count(*) FROM measurements GROUP BY ALL").fetchall())
    return loaded, held


def test_a_device_partition_replaces_the_kind_partition_of_the_same_device(tmp_path):
    database = tmp_path / "devicefit.duckdb"
    config = BenchmarkConfig(model="bert-tiny")
    old = [replace(_row(config, 5.0), run_id="old")]
    _load(database, "partition:cpu|bert-tiny", old)
    new = [replace(_row(config, 5.2), run_id="new")]
    loaded, held = _load(database, "partition:cpu-abc|bert-tiny", new, supersedes=["partition:cpu|bert-tiny"])
    assert loaded.superseded == ("partition:cpu|bert-tiny",)
    assert held == {"partition:cpu-abc|bert-tiny": 1}  # one run of the config, not the median of two
    with store.opened(database, read_only=True) as con:
        history = {r[0] for r in con.execute("SELECT run_id FROM sample_history").fetchall()}
    assert history == {"old", "new"}  # the replaced run's samples stay for regression tracking


def test_a_partition_under_the_id_from_before_host_qualified_ids_is_superseded_on_its_own_host_only(tmp_path):
    """OpenVINO's CPU plugin was openvino-4ebbcabb1705 on every host; its partition is now
    openvino-4ebbcabb1705-<host>. The old partition's file, written on this host, is superseded
    by the new one (one run of each config in the store, not two); the same file written on
    another host is not (it stays, and loads as that host's)."""
    from benchmark_runners.hardware.inventory import unqualified
    from devicefit.landing import superseded_landing

    plain, here, there = "openvino-4ebbcabb1705", "cpu-aaaaaaaaaaaa", "cpu-bbbbbbbbbbbb"
    assert unqualified(f"{plain}-aaaaaaaaaaaa") == plain and unqualified(plain) is None and unqualified(here) is None
    row = replace(_row(BenchmarkConfig(model="bert-tiny", device="openvino:CPU", backend="openvino"), 5.0), hardware_fingerprint=plain)
    key = f"partition:{plain}|bert-tiny"
    for host in (here, there):
        raw = tmp_path / host
        hardware = {"hostname": "vm", "platforms": {"cpu": {"available": True, "devices": [{"name": "X", "fingerprint": host}]},
                                                    "openvino": {"available": True, "devices": [{"name": "CPU", "fingerprint": plain}]}}}
        write_landing(raw, key, results_document("r", [row], hardware))
        found = superseded_landing(raw, key, f"{plain}-aaaaaaaaaaaa", here)
        assert (found is not None) == (host == here), host


def test_a_document_cannot_supersede_rows_of_another_device_or_model(tmp_path):
    database = tmp_path / "devicefit.duckdb"
    config = BenchmarkConfig(model="bert-tiny")
    _load(database, "partition:cpu|bert-tiny", [replace(_row(config, 5.0, fingerprint="cpu-other"), run_id="a")])
    _load(database, "partition:cpu|gpt2", [replace(_row(replace(config, model="gpt2"), 9.0), run_id="b")])
    _load(database, "ingest:x", [replace(_row(config, 5.0), run_id="c")])
    loaded, held = _load(database, "partition:cpu-abc|bert-tiny", [replace(_row(config, 5.1), run_id="d")],
                         supersedes=["partition:cpu|bert-tiny", "partition:cpu|gpt2", "partition:ingest:x"])
    assert loaded.superseded == () and len(held) == 4


def test_an_ingested_document_cannot_supersede_a_partition(tmp_path):
    """Only a partition's own document replaces an older partition: an ingested file naming the
    local partition in `supersedes` (same device, same model) left the store without the rows
    measured here until the next load."""
    database = tmp_path / "devicefit.duckdb"
    config = BenchmarkConfig(model="bert-tiny")
    _load(database, "partition:cpu|bert-tiny", [replace(_row(config, 5.0), run_id="here")])
    with store.opened(database) as con:
        document = {**results_document("r", [replace(_row(config, 5.1), run_id="copied")], HARDWARE),
                    "supersedes": ["partition:cpu|bert-tiny"]}
        loaded = store.replace_source(con, "ingest:abc", "ingest", document)
        held = dict(con.execute("SELECT source_key, count(*) FROM measurements GROUP BY ALL").fetchall())
    assert loaded.superseded == () and held == {"partition:cpu|bert-tiny": 1, "ingest:abc": 1}


@pytest.mark.parametrize("supersedes", ["partition:cpu|x", ["ingest:abc"], [1], ["partition:a"] * 5])
def test_a_malformed_supersedes_is_refused_by_name(supersedes, tmp_path):
    document = {**results_document("r", [_row(BenchmarkConfig(model="bert-tiny"), 5.0)], HARDWARE), "supersedes": supersedes}
    with pytest.raises(LandingFileError, match="supersedes must be a list"):
        write_landing(tmp_path, "partition:cpu-abc|bert-tiny", document)


TINY = Selection(batch_sizes=(1,), precisions=("fp32",), training_mode=False)


def test_measuring_a_device_partition_retires_the_kind_partition_file(tmp_path):
    paths = DataPaths(tmp_path)
    inventory = detect_hardware()
    measure_partition("cpu|bert-tiny", TINY, inventory, paths)  # what a version before device partitions wrote
    load_landing_files(paths.database, paths.raw)
    device = inventory.to_json()["platforms"]["cpu"]["devices"][0]["fingerprint"]
    outcome = measure_partition(f"{device}|bert-tiny", TINY, inventory, paths)
    assert outcome.results[0].status == "ok" and outcome.results[0].hardware_fingerprint == device
    assert not (paths.raw / "partition__cpu__bert-tiny.json").exists()
    assert (paths.raw / "superseded" / "partition__cpu__bert-tiny.json").is_file()  # kept, out of the loader's way
    report = load_landing_files(paths.database, paths.raw)
    assert report.superseded == [("partition:cpu|bert-tiny", f"partition:{device}|bert-tiny")]
    with store.opened(paths.database, read_only=True) as con:
        assert con.execute("SELECT source_key, count(*) FROM measurements GROUP BY ALL").fetchall() == [(f"partition:{device}|bert-tiny", 1)]


def test_a_profiled_device_partition_runs_under_its_profile_with_its_own_probe(tmp_path):
    paths = DataPaths(tmp_path)
    inventory = detect_hardware()
    device = inventory.to_json()["platforms"]["cpu"]["devices"][0]["fingerprint"]
    outcome = measure_partition(f"{device}+t1|bert-tiny", TINY, inventory, paths)
    [row] = outcome.results
    assert row.status == "ok", row.error
    assert row.device_profile == "t1" and row.environment["torch_threads"] == 1
    document = json.loads(open(outcome.landing_path).read())
    probe = document["hardware"]["probes"][f"{device}+t1"]
    assert probe["fingerprint"] == f"{device}+t1" and probe["matmul_gflops_best"] > 0
    load_landing_files(paths.database, paths.raw)
    with store.opened(paths.database, read_only=True) as con:
        fleet = {d["id"]: d for d in store.devices(con)}
    assert fleet[f"{device}+t1"]["profile"] == {"threads": 1, "isa": None}
    assert fleet[f"{device}+t1"]["probe"]["matmul_gflops_best"] == probe["matmul_gflops_best"]


def _device_record(**over):
    return {"id": "cuda-dddddddddddd", "kind": "cuda", "name": "NVIDIA H100", "hostname": "gpu1", "host_fingerprint": "cpu-eeeeeeeeeeee",
            "hardware_fingerprint": "cuda-dddddddddddd", "profile": {"threads": None, "isa": None}, "details": {"memory_total_bytes": 8e10},
            "probe": {"fingerprint": "cuda-dddddddddddd", "matmul_gflops_best": 5.1e5, "memory_bandwidth_gbs_best": 2900.0},
            "registered_at": "2026-11-25T10:00:00+00:00", **over}


def test_a_device_a_worker_wrote_is_registered_at_the_next_load(tmp_path):
    paths = DataPaths(tmp_path)
    (paths.raw / "devices").mkdir(parents=True)
    (paths.raw / "devices" / "cuda-dddddddddddd.json").write_text(json.dumps(_device_record()))
    report = load_landing_files(paths.database, paths.raw)
    assert report.devices_registered == ["cuda-dddddddddddd"] and not report.quarantined
    with store.opened(paths.database, read_only=True) as con:
        [device] = store.devices(con)
        seen = con.execute("SELECT last_seen FROM devices").fetchone()[0]
    assert device["probe"]["matmul_gflops_best"] == 5.1e5 and device["hostname"] == "gpu1"
    again = load_landing_files(paths.database, paths.raw)  # unchanged file: not registered again, last_seen kept
    assert again.devices_registered == []
    with store.opened(paths.database, read_only=True) as con:
        assert con.execute("SELECT last_seen FROM devices").fetchone()[0] == seen


def test_a_device_record_on_the_host_cpu_registers_under_its_host_qualified_id(tmp_path):
    """A worker serving OpenVINO's CPU plugin writes its record under the host-qualified id
    (which the record's id pattern accepts); one written before, under the id every host shared,
    registers under the id its rows now load under, by the record's own host."""
    paths = DataPaths(tmp_path)
    (paths.raw / "devices").mkdir(parents=True)
    plain, qualified = "openvino-4ebbcabb1705", "openvino-4ebbcabb1705-eeeeeeeeeeee"
    for name, fingerprint in (("old.json", plain), ("new.json", "openvino-4ebbcabb1705-ffffffffffff")):
        (paths.raw / "devices" / name).write_text(json.dumps(_device_record(
            id=fingerprint, kind="openvino", name="CPU", hardware_fingerprint=fingerprint, details={"name": "CPU"}, probe=None)))
    report = load_landing_files(paths.database, paths.raw)
    assert sorted(report.devices_registered) == [qualified, "openvino-4ebbcabb1705-ffffffffffff"] and not report.quarantined


@pytest.mark.parametrize("over, words", [
    ({"id": "../../etc/passwd"}, "id"),
    ({"id": "cuda-dddddddddddd+t1"}, "is not its hardware fingerprint and profile"),
    ({"kind": "toaster"}, "unknown device kind"),
    ({"probe": {"matmul_gflops_best": -1}}, "matmul_gflops_best"),
    ({"probe": {"matmul_gflops_best": 100.0, "tiny_kernel_us_median": -2}}, "tiny_kernel_us_median"),
    ({"probe": {"matmul_gflops_best": 100.0, "matmul_gflops_bf16_best": 0}}, "matmul_gflops_bf16_best"),
    ({"probe": {"matmul_gflops_best": 100.0, "speed_reference": {"before_gflops": 150.0, "after_gflops": -3}}}, "speed_reference.after_gflops"),
    ({"profile": {"threads": 0, "isa": None}}, "threads"),
])
def test_a_bad_device_record_is_quarantined_with_its_reason(over, words, tmp_path):
    paths = DataPaths(tmp_path)
    (paths.raw / "devices").mkdir(parents=True)
    (paths.raw / "devices" / "x.json").write_text(json.dumps(_device_record(**over)))
    report = load_landing_files(paths.database, paths.raw)
    [(name, reason)] = report.quarantined
    assert name == "devices/x.json" and words in reason
    assert (paths.raw / "devices" / "quarantine" / "x.json.reason.txt").is_file()
    with store.opened(paths.database, read_only=True) as con:
        assert store.devices(con) == []


def test_regression_tracking_compares_a_profile_with_its_own_previous_run(tmp_path):
    """The 1-thread run of a config is another device's run: not a regression of the 2-thread one."""
    from devicefit.reports.regression import compare, current_sets, previous_sets

    database = tmp_path / "devicefit.duckdb"
    config = BenchmarkConfig(model="bert-tiny")
    _load(database, "partition:cpu-abc|bert-tiny", [replace(_row(config, 5.0), run_id="plain-1")])
    _load(database, "partition:cpu-abc+t1|bert-tiny", [replace(_row(replace(config, threads=1), 9.0), run_id="t1-1")])
    current = current_sets(database)
    assert sorted(s.identity.device_profile or "" for s in current) == ["", "t1"]
    assert {c.verdict for c in compare(current, previous_sets(database, current), threshold=0.1)} == {"new"}
    later = replace(_row(replace(config, threads=1), 9.05), run_id="t1-2", timestamp="2026-11-26T10:00:00+00:00")
    _load(database, "partition:cpu-abc+t1|bert-tiny", [later])
    current = current_sets(database)
    verdicts = {c.identity.get("device_profile"): (c.verdict, c.baseline_run) for c in compare(current, previous_sets(database, current), 0.1)}
    assert verdicts["t1"] == ("unchanged", "t1-1") and verdicts[None][0] == "new"


def test_a_superseded_file_left_behind_by_a_killed_partition_is_retired_not_loaded_again(tmp_path):
    """measure_partition writes the device partition's file, then retires the kind partition's
    file it supersedes; killed in between, the next load dropped the old rows and then loaded
    the old file again, so the store held both runs of the device and model for good."""
    raw, database = tmp_path / "raw", tmp_path / "devicefit.duckdb"
    config = BenchmarkConfig(model="bert-tiny")
    write_landing(raw, "partition:cpu|bert-tiny", results_document("old", [replace(_row(config, 5.0), run_id="old")], HARDWARE))
    load_landing_files(database, raw)
    write_landing(raw, "partition:cpu-abc|bert-tiny", {**results_document("new", [replace(_row(config, 5.2), run_id="new")], HARDWARE),
                                                       "supersedes": ["partition:cpu|bert-tiny"]})  # no retire_landing: killed
    for _ in range(2):
        load_landing_files(database, raw)
        with store.opened(database, read_only=True) as con:
            assert con.execute("SELECT source_key, run_id FROM measurements").fetchall() == [("partition:cpu-abc|bert-tiny", "new")]
    assert (raw / "superseded" / "partition__cpu__bert-tiny.json").is_file() and not (raw / "partition__cpu__bert-tiny.json").exists()


@pytest.mark.parametrize("late_copy", [False, True])
def test_a_superseded_file_never_loaded_is_retired_not_loaded_beside_its_successor(tmp_path, late_copy):
    """The successor's file sorts first ("cpu-" before "cpu_"), so an old file the store never
    loaded (a partition killed before retiring it, or the old file copied back into raw/ later)
    came after it in the same load and was stored beside it: two runs of one device and model."""
    raw, database = tmp_path / "raw", tmp_path / "devicefit.duckdb"
    config = BenchmarkConfig(model="bert-tiny")
    old = results_document("old", [replace(_row(config, 5.0), run_id="old")], HARDWARE)
    write_landing(raw, "partition:cpu-abc|bert-tiny", {**results_document("new", [replace(_row(config, 5.2), run_id="new")], HARDWARE),
                                                       "supersedes": ["partition:cpu|bert-tiny"]})
    if late_copy:
        load_landing_files(database, raw)
    write_landing(raw, "partition:cpu|bert-tiny", old)
    for _ in range(2):
        load_landing_files(database, raw)
        with store.opened(database, read_only=True) as con:
            assert con.execute("SELECT source_key, run_id FROM measurements").fetchall() == [("partition:cpu-abc|bert-tiny", "new")]
    assert (raw / "superseded" / "partition__cpu__bert-tiny.json").is_file() and not (raw / "partition__cpu__bert-tiny.json").exists()


def test_a_partition_measured_again_still_supersedes_what_it_superseded(tmp_path):
    """Measured again, the device partition's document names nothing (the old file was retired
    the first time), and sources forgot what it superseded: a copy of the old file put back in
    raw/ was then stored beside it again."""
    raw, database = tmp_path / "raw", tmp_path / "devicefit.duckdb"
    config = BenchmarkConfig(model="bert-tiny")
    write_landing(raw, "partition:cpu|bert-tiny", results_document("old", [replace(_row(config, 5.0), run_id="old")], HARDWARE))
    load_landing_files(database, raw)
    write_landing(raw, "partition:cpu-abc|bert-tiny", {**results_document("new", [replace(_row(config, 5.2), run_id="new")], HARDWARE),
                                                       "supersedes": ["partition:cpu|bert-tiny"]})
    load_landing_files(database, raw)
    write_landing(raw, "partition:cpu-abc|bert-tiny", results_document("new2", [replace(_row(config, 5.1), run_id="new2")], HARDWARE))
    load_landing_files(database, raw)
    (raw / "superseded" / "partition__cpu__bert-tiny.json").replace(raw / "partition__cpu__bert-tiny.json")
    report = load_landing_files(database, raw)
    assert report.superseded == [("partition:cpu|bert-tiny", "partition:cpu-abc|bert-tiny")]
    with store.opened(database, read_only=True) as con:
        assert con.execute("SELECT source_key, run_id FROM measurements").fetchall() == [("partition:cpu-abc|bert-tiny", "new2")]


def test_an_old_partition_measured_after_its_successor_is_kept(tmp_path):
    """An old kind partition materialized again (from the UI) after its device partition ran
    holds newer rows than its successor: they are stored, not retired as superseded."""
    raw, database = tmp_path / "raw", tmp_path / "devicefit.duckdb"
    config = BenchmarkConfig(model="bert-tiny")
    write_landing(raw, "partition:cpu-abc|bert-tiny", {**results_document("new", [replace(_row(config, 5.2), run_id="new")], HARDWARE),
                                                       "supersedes": ["partition:cpu|bert-tiny"]})
    load_landing_files(database, raw)
    later = replace(_row(config, 5.0), run_id="later", timestamp="2026-11-26T10:00:00+00:00")
    write_landing(raw, "partition:cpu|bert-tiny", results_document("later", [later], HARDWARE))
    report = load_landing_files(database, raw)
    assert report.superseded == [] and (raw / "partition__cpu__bert-tiny.json").is_file()
    with store.opened(database, read_only=True) as con:
        assert sorted(con.execute("SELECT run_id FROM measurements").fetchall()) == [("later",), ("new",)]


def test_a_store_from_before_migration_24_learns_what_its_partitions_supersede(tmp_path):
    """A successor stored before sources kept `supersedes` is loaded once more after the
    migration, so an older partition's file that turns up later is retired, not stored."""
    raw, database = tmp_path / "raw", tmp_path / "devicefit.duckdb"
    config = BenchmarkConfig(model="bert-tiny")
    write_landing(raw, "partition:cpu-abc|bert-tiny", {**results_document("new", [replace(_row(config, 5.2), run_id="new")], HARDWARE),
                                                       "supersedes": ["partition:cpu|bert-tiny"]})
    load_landing_files(database, raw)
    with store.opened(database) as con:  # what a store at schema 23 held
        con.execute("ALTER TABLE sources DROP COLUMN supersedes")
        con.execute("DELETE FROM schema_version WHERE version >= 24")
    write_landing(raw, "partition:cpu|bert-tiny", results_document("old", [replace(_row(config, 5.0), run_id="old")], HARDWARE))
    report = load_landing_files(database, raw)
    assert report.superseded == [("partition:cpu|bert-tiny", "partition:cpu-abc|bert-tiny")]
    with store.opened(database, read_only=True) as con:
        assert con.execute("SELECT source_key, run_id FROM measurements").fetchall() == [("partition:cpu-abc|bert-tiny", "new")]


def test_a_partition_names_its_model_by_a_name_that_resolves_back_to_it(tmp_path, monkeypatch):
    """`devicefit run --model DIR` put the directory's name in the key, and the partition
    resolved that name alone: a directory called bert-tiny (one layer, hidden 64) was measured
    as the catalog's bert-tiny, 4.4M parameters, stored under its name. One model named several
    ways (bert-tiny, BERT-TINY, its alias, its hub id) made as many identical partition keys."""
    from models.catalog import load_catalog
    from models.registry import register_model

    monkeypatch.setenv("DEVICEFIT_DATA_DIR", str(tmp_path / "data"))
    directory = tmp_path / "bert-tiny"
    directory.mkdir()
    (directory / "config.json").write_text(json.dumps({**load_catalog()["bert-tiny"].config, "num_hidden_layers": 1}))
    with pytest.raises(ValueError, match="register it first"):
        Selection(models=(str(directory),)).model_names()
    named = Selection(models=("bert-tiny", "BERT-TINY", "bert-tiny-uncased", "prajjwal1/bert-tiny"), hardware=("cpu",))
    assert named.partition_keys(INVENTORY) == ["cpu-aaaaaaaaaaaa|bert-tiny"]
    register_model(tmp_path / "data", directory, name="my-tiny")
    assert Selection(models=("my-tiny",)).model_names() == ["my-tiny"]
    assert Selection(models=(str(directory),)).model_names() == ["my-tiny"]  # registered: by its registered name
