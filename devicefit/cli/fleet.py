"""`devicefit devices list|register`: the fleet's registered devices in the store."""
from __future__ import annotations

import json
from typing import Optional

import typer
from rich.table import Table

from devicefit.cli.common import AS_JSON, app, console, data_paths, fail

PANEL = "Data"
devices_app = typer.Typer(no_args_is_help=True, help="Registered devices: hardware x constraint profile, each with its own probe.")
app.add_typer(devices_app, name="devices", rich_help_panel=PANEL)


@devices_app.command("list")
def devices_list(kind: Optional[str] = typer.Option(None, "--kind", help="Only devices of this kind (cpu, cuda, openvino, ...)."),
                 as_json: bool = AS_JSON) -> None:
    """The devices registered in the store, with their profile and probe figures."""
    from benchmark_runners import registry
    from devicefit import store

    if kind is not None and kind not in registry.kind_names():
        fail(f"unknown hardware kind {kind!r}; known: {', '.join(registry.kind_names())}")
    paths = data_paths()
    if not paths.database.exists():
        rows = []
    else:
        with store.opened(paths.database, read_only=True) as con:
            rows = store.devices(con, kind) if store.schema_version(con) >= 12 else []
    if as_json:
        print(json.dumps(rows, indent=2, default=str))
        return
    if not rows:
        console.print(f"no registered {kind} devices" if kind else
                      "no registered devices: `devicefit devices register --kind cpu` registers this host's CPU")
        return
    table = Table(title=f"Registered devices ({paths.database})")
    for col in ("id", "kind", "name", "host", "profile", "GFLOP/s", "GB/s", "last seen"):
        table.add_column(col)
    for r in rows:
        probe = r["probe"] or {}
        profile = ", ".join(f"{k}={v}" for k, v in (r["profile"] or {}).items() if v is not None) or "-"
        table.add_row(r["id"], r["kind"], r["name"] or "-", r["hostname"] or "-", profile,
                      f"{probe['matmul_gflops_best']:.0f}" if probe.get("matmul_gflops_best") else "-",
                      f"{probe['memory_bandwidth_gbs_best']:.1f}" if probe.get("memory_bandwidth_gbs_best") else "-",
                      str(r["last_seen"])[:19])
    console.print(table)


@devices_app.command("register")
def devices_register(
    kind: str = typer.Option("cpu", "--kind", help="The kind of this host's device to register (cpu, cuda, openvino, ...)."),
    index: int = typer.Option(0, "--index", help="Which device of that kind (GPUs: 0, 1, ...)."),
    threads: Optional[int] = typer.Option(None, "--threads", help="Constraint: compute threads (a 1-core container: 1)."),
    isa: Optional[str] = typer.Option(None, "--isa", help="Constraint: cap the CPU's instruction set (avx2, avx512), as an older host."),
    probe: bool = typer.Option(True, "--probe/--no-probe", help="Measure the device's peak GFLOP/s and bandwidth under the profile."),
    as_json: bool = AS_JSON,
) -> None:
    """Detect this host's device, apply the constraint profile, probe it under the profile (in a
    fresh process: an ISA cap is read at library load) and register it in the store. Registering
    again refreshes its description and probe; its id and first registration stay."""
    from benchmark_runners.hardware import detect_hardware
    from devicefit import store
    from devicefit.fleet.constraints import ConstraintProfile
    from devicefit.fleet.devices import local_device, probe_under

    device = local_device(kind, detect_hardware(probe=False).to_json(), ConstraintProfile(threads, isa), index)
    if probe:
        device.probe = probe_under(device, index)
    paths = data_paths()
    with store.opened(paths.database) as con:
        store.migrate(con)
        new = store.register_device(con, device.to_json())
    if as_json:
        print(json.dumps({**device.to_json(), "new": new}, indent=2))
        return
    figures = (f": {device.probe['matmul_gflops_best']:.0f} GFLOP/s, {device.probe['memory_bandwidth_gbs_best']:.1f} GB/s "
               f"({device.probe['threads']} threads, ATen {device.probe['aten_cpu_capability']})") if device.probe else ""
    console.print(f"{'registered' if new else 'refreshed'} {device.id} ({device.name} on {device.hostname}){figures}")
