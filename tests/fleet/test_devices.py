"""Devices as entities: constraint profiles, stable ids, registration in the store, and a probe
that runs under its profile (a real subprocess on this CPU)."""
import json

import pytest
from typer.testing import CliRunner

from benchmark_runners.hardware import detect_hardware
from devicefit import store
from devicefit.cli import app
from devicefit.fleet.constraints import BadProfile, ConstraintProfile
from devicefit.fleet.devices import DeviceUnavailable, local_device, probe_under

XEON = {"name": "cpu", "logical_cores": 2, "physical_cores": 2, "isa_flags": ["avx", "avx2", "avx512f"]}


@pytest.fixture(scope="module")
def inventory() -> dict:
    return detect_hardware(probe=False).to_json()


def _cpu(inventory) -> dict:
    return inventory["platforms"]["cpu"]["devices"][0]


def test_a_profile_says_what_it_sets_and_refuses_what_it_cannot_be():
    p = ConstraintProfile(threads=1, isa="avx2")
    assert p.slug() == "t1-avx2" and ConstraintProfile.parse_slug("t1-avx2") == p
    assert p.env() == {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "ONEDNN_MAX_CPU_ISA": "AVX2",
                       "ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2"}
    assert ConstraintProfile().slug() == "" and ConstraintProfile().env() == {}
    for bad, match in (({"threads": 0}, "positive integer"), ({"threads": True}, "positive integer"),
                       ({"isa": "sse9"}, "unknown ISA cap")):
        with pytest.raises(BadProfile, match=match):
            ConstraintProfile(**bad)


def test_a_profile_the_device_cannot_honour_is_refused_with_the_reason():
    with pytest.raises(BadProfile, match="not cuda"):
        ConstraintProfile(threads=1).check_applies("cuda", {})
    with pytest.raises(BadProfile, match="3 threads on a device with 2 logical cores"):
        ConstraintProfile(threads=3).check_applies("cpu", XEON)
    with pytest.raises(BadProfile, match="no avx512"):
        ConstraintProfile(isa="avx512").check_applies("cpu", {**XEON, "isa_flags": ["avx", "avx2"]})
    ConstraintProfile(threads=2, isa="avx2").check_applies("cpu", XEON)
    # a container's cgroup quota of 1.5 CPUs on a 64-core host: two threads are oversubscription
    contained = {**XEON, "logical_cores": 64, "physical_cores": 32, "usable_cpus": 1.5}
    with pytest.raises(BadProfile, match="may use 1.5 CPUs"):
        ConstraintProfile(threads=2).check_applies("cpu", contained)
    ConstraintProfile(threads=1).check_applies("cpu", contained)


def test_device_ids_are_the_hardware_fingerprint_plus_the_profile(inventory):
    plain = local_device("cpu", inventory)
    assert plain.id == plain.hardware_fingerprint == _cpu(inventory)["fingerprint"] == plain.host_fingerprint
    one = local_device("cpu", inventory, ConstraintProfile(threads=1))
    assert one.id == f"{plain.id}+t1" and one.hardware_fingerprint == plain.id
    assert local_device("cpu", detect_hardware(probe=False).to_json(), ConstraintProfile(threads=1)).id == one.id  # stable
    assert "memory_available_bytes" not in one.details  # volatile figures are not a description
    with pytest.raises(DeviceUnavailable, match="a device index is 0, 1"):
        local_device("cpu", inventory, index=-1)  # never the last device by Python's negative indexing
    with pytest.raises(DeviceUnavailable, match="no cpu device 1 on this host"):
        local_device("cpu", inventory, index=1)
    with pytest.raises(DeviceUnavailable, match="no qnn device 0 on this host"):
        local_device("qnn", inventory)
    with pytest.raises(Exception, match="unknown hardware 'tpu9'"):
        local_device("tpu9", inventory)


def test_the_probe_runs_under_the_profile(inventory):
    """The figures come from a fresh process that ran with one thread and, where the CPU has
    AVX2, ATen capped at it: recorded from inside that process, not assumed."""
    isa = "avx2" if "avx2" in _cpu(inventory).get("isa_flags", []) else None
    device = local_device("cpu", inventory, ConstraintProfile(threads=1, isa=isa))
    probe = probe_under(device)
    assert probe["threads"] == 1 and probe["matmul_gflops_best"] > 0 and probe["memory_bandwidth_gbs_best"] > 0
    if isa:
        assert probe["aten_cpu_capability"] == "AVX2" and probe["onednn_max_cpu_isa"] == "AVX2"


def test_registering_twice_keeps_one_device_and_its_first_registration(tmp_path, inventory):
    con = store.connect(tmp_path / "db.duckdb")
    store.migrate(con)
    device = local_device("cpu", inventory, ConstraintProfile(threads=1)).to_json()
    assert store.register_device(con, {**device, "probe": {"matmul_gflops_best": 100.0}})
    first = store.devices(con)[0]
    assert not store.register_device(con, {**device, "registered_at": "2030-01-01T00:00:00+00:00", "probe": None})
    [again] = store.devices(con)
    assert again["registered_at"] == first["registered_at"] and again["last_seen"] >= first["last_seen"]
    assert again["probe"] == {"matmul_gflops_best": 100.0}  # a refresh without a probe keeps the measured one
    assert again["profile"] == {"threads": 1, "isa": None} and store.devices(con, "cuda") == []
    con.close()


def test_the_cli_registers_and_lists_devices(tmp_path, monkeypatch):
    monkeypatch.setenv("DEVICEFIT_DATA_DIR", str(tmp_path))
    runner = CliRunner()
    assert "no registered devices" in runner.invoke(app, ["devices", "list"]).output
    result = runner.invoke(app, ["devices", "register", "--threads", "1", "--no-probe", "--json"])
    assert result.exit_code == 0, result.output
    registered = json.loads(result.output)
    assert registered["new"] and registered["id"].endswith("+t1")
    listed = json.loads(runner.invoke(app, ["devices", "list", "--json"]).output)
    assert [d["id"] for d in listed] == [registered["id"]]
    bad = runner.invoke(app, ["devices", "register", "--threads", "0", "--no-probe"])
    assert bad.exit_code == 2 and "threads must be a positive integer" in bad.output
