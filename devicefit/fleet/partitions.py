"""The measurement partitions' device dimension: device ids, and what one means on this host.

A partition is (device, model), its key "<device id>|<model>" (Dagster orders a multi-partition's
dimensions by name: "device" before "model"). A device id is a registered device's id
(devicefit.fleet.devices: the hardware fingerprint plus a constraint profile's slug), so two
CPUs, two GPU boxes, or one CPU under two profiles are different partitions. A partition runs on
the host that has its device: `resolve_local` finds the device in this host's detection and says
which backend device string, index and profile measure it, or refuses by name when the device is
elsewhere (a worker on its host runs it).

Keys written before devices were entities named a kind ("cpu|gpt2"); they still resolve, to this
host's first device of that kind as it is, and a device partition of that device supersedes the
old kind partition's landing file (`legacy_partition_key`), so re-measuring never adds a second
copy of the same rows."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from benchmark_runners import registry
from devicefit.fleet.constraints import BadProfile, ConstraintProfile
from devicefit.fleet.devices import DeviceUnavailable

DIMENSIONS = ("device", "model")  # the MultiPartitionsDefinition's dimension names, in key order
KEY_SEPARATOR = "|"


class BadPartitionKey(DeviceUnavailable):
    """A partition key that is not "<device id or kind>|<model>"."""


def partition_key(device_id: str, model: str) -> str:
    return f"{device_id}{KEY_SEPARATOR}{model}"


def split_partition_key(key: str) -> tuple[str, str]:
    """(device reference, model) of a partition key; refuses what is not one by name."""
    device, sep, model = str(key).partition(KEY_SEPARATOR)
    if not sep or not device or not model or KEY_SEPARATOR in model:
        raise BadPartitionKey(f"{str(key)[:120]!r} is not a partition key '<device id>{KEY_SEPARATOR}<model>'")
    return device, model


def split_device_id(device_id: str) -> tuple[str, ConstraintProfile]:
    """(hardware fingerprint, constraint profile) of a device id ("cpu-e1d9c1f8fde0+t1")."""
    fingerprint, _, slug = device_id.partition("+")
    if not fingerprint:
        raise BadPartitionKey(f"{device_id!r} is not a device id (<hardware fingerprint>[+<profile>])")
    try:
        return fingerprint, ConstraintProfile.parse_slug(slug)
    except BadProfile as exc:
        raise BadPartitionKey(f"device id {device_id!r}: {exc}") from None


@dataclass(frozen=True)
class LocalTarget:
    """A device of this host, as a partition measures it."""

    device_id: str
    kind: str
    device: str  # what the backend addresses ("cpu", "cuda:1", "openvino:CPU")
    index: int
    hardware_fingerprint: str
    profile: ConstraintProfile = field(default_factory=ConstraintProfile)
    details: dict[str, Any] = field(default_factory=dict)  # the detection's entry for the device

    @property
    def legacy_kind(self) -> str | None:
        """The kind whose old kind-level partition measured exactly this device, if one did:
        the first device of a kind, as it is."""
        return self.kind if self.index == 0 and self.profile.empty else None


def _measurable_devices(inventory: dict[str, Any]) -> list[tuple[str, int, dict[str, Any]]]:
    platforms = inventory.get("platforms") or {}
    out = []
    for kind in registry.measurable_kinds():
        info = platforms.get(kind) or {}
        if info.get("available"):
            out += [(kind, i, dev) for i, dev in enumerate(info.get("devices") or []) if isinstance(dev, dict) and dev.get("fingerprint")]
    return out


def _target(kind: str, index: int, dev: dict[str, Any], profile: ConstraintProfile) -> LocalTarget:
    profile.check_applies(kind, dev)  # BadProfile: a thread count past its cores, an ISA it lacks
    device = registry.partition_device(kind) if index == 0 else registry.kind(kind).device_id({**dev, "index": index})
    fingerprint = dev["fingerprint"]
    slug = profile.slug()
    return LocalTarget(f"{fingerprint}+{slug}" if slug else fingerprint, kind, device, index, fingerprint, profile, dev)


def resolve_local(reference: str, inventory: dict[str, Any]) -> LocalTarget:
    """The device `reference` (a device id, or a kind for this host's first device of it as it
    is) names on this host, from a detection's JSON. DeviceUnavailable names the devices this
    host has when it is not one of them."""
    found = _measurable_devices(inventory)
    if reference in registry.kind_names():
        for kind, index, dev in found:
            if kind == reference:
                return _target(kind, index, dev, ConstraintProfile())
        reason = ((inventory.get("platforms") or {}).get(reference) or {}).get("reason") or "not detected"
        raise DeviceUnavailable(f"no {reference} device on this host: {reason}")
    fingerprint, profile = split_device_id(reference)
    for kind, index, dev in found:
        if dev["fingerprint"] == fingerprint:
            return _target(kind, index, dev, profile)
    here = ", ".join(dev["fingerprint"] for _, _, dev in found) or "none"
    raise DeviceUnavailable(f"device {reference} is not on this host {inventory.get('hostname') or ''} (its measurable devices: "
                            f"{here}); it is measured by a worker on its own host (devicefit worker --device {reference})")


def local_device_ids(inventory: dict[str, Any], kinds: list[str] | tuple[str, ...] | None = None) -> list[str]:
    """This host's devices as they are, the first of each measurable kind (what `make run`
    measures), in the registry's order; `kinds` narrows them."""
    seen: list[str] = []
    for kind, index, dev in _measurable_devices(inventory):
        if index == 0 and (kinds is None or kind in kinds):
            seen.append(dev["fingerprint"])
    return seen


def capped_isa_flags(flags: list[str], isa: str | None) -> list[str]:
    """The CPU's ISA flags as a process under an ISA cap sees them: an AVX2 cap hides AVX-512 and
    AMX, an AVX-512 cap hides AMX (what decides, for example, whether bf16 runs natively)."""
    if isa == "avx2":
        return [f for f in flags if not f.startswith(("amx", "avx512"))]
    if isa == "avx512":
        return [f for f in flags if not f.startswith("amx")]
    return list(flags)


def host_of_inventory(inventory: dict[str, Any]) -> str | None:
    """A host's CPU fingerprint (how rows and devices name their host), from its detection."""
    devices = ((inventory.get("platforms") or {}).get("cpu") or {}).get("devices") or [{}]
    return devices[0].get("fingerprint") if isinstance(devices[0], dict) else None


def hardware_of_inventory(inventory: dict[str, Any]) -> frozenset[str]:
    """Every device fingerprint a host's detection lists (its CPU's, its GPUs'): which of two
    GPUs behind one host CPU fingerprint is this machine's."""
    return frozenset(d["fingerprint"] for info in (inventory.get("platforms") or {}).values() if isinstance(info, dict)
                     for d in info.get("devices") or [] if isinstance(d, dict) and d.get("fingerprint"))


def device_tag(kind: str, host: str | None, software: bool = False) -> str:
    """The run tag value that keeps one benchmark per physical device at a time (dagster.yaml's
    limit on devicefit/device): the physical kind on its host, so OpenVINO's CPU plugin, wasm,
    WebGPU on a software adapter (`software`) and every constraint profile of a CPU wait for each
    other, and two hosts' CPUs do not."""
    physical = registry.physical_kind(kind, software=software)
    return f"{physical}@{host}" if host else physical


def is_software_device(kind: str, inventory: dict[str, Any]) -> bool:
    """Whether a host's detection found its `kind` device to be software (WebGPU on SwiftShader)."""
    devices = ((inventory.get("platforms") or {}).get(kind) or {}).get("devices") or []
    return bool(devices and isinstance(devices[0], dict) and devices[0].get("software"))


@dataclass(frozen=True)
class ScheduledDevice:
    """A device a sweep measures, and the host whose worker (or in-process run) measures it."""

    device_id: str
    kind: str
    host: str | None  # the host's CPU fingerprint
    software: bool = False  # a software device (WebGPU on SwiftShader): its tag is the CPU's

    @property
    def tag(self) -> str:
        return device_tag(self.kind, self.host, self.software)


def schedulable_devices(registered: list[dict[str, Any]], inventory: dict[str, Any], dispatch: bool = False) -> list[ScheduledDevice]:
    """The devices a sweep measures. In-process (no broker): every registered device (the
    fleet's, from the store) that is on this host and can run here under its profile, then this
    host's devices not registered yet (a fresh store); other hosts' devices are left out, nothing
    here can measure them. With a broker (`dispatch`): every registered device of a measurable
    kind as well, each run going to the queue its host's worker consumes."""
    host = host_of_inventory(inventory)
    out: dict[str, ScheduledDevice] = {}
    for d in registered:
        if d.get("kind") not in registry.measurable_kinds():
            continue
        try:
            target = resolve_local(str(d.get("id")), inventory)
            out.setdefault(target.device_id, ScheduledDevice(target.device_id, target.kind, host, is_software_device(target.kind, inventory)))
        except (DeviceUnavailable, BadProfile):
            if dispatch:
                out.setdefault(str(d["id"]), ScheduledDevice(str(d["id"]), str(d["kind"]), d.get("host_fingerprint")))
    for device_id in local_device_ids(inventory):
        if device_id not in out:
            kind = resolve_local(device_id, inventory).kind
            out[device_id] = ScheduledDevice(device_id, kind, host, is_software_device(kind, inventory))
    return list(out.values())


def dispatched_device_tags(partition_keys: list[str], inventory: dict[str, Any], registered: list[dict[str, Any]],
                           partitioned: set[str] | frozenset[str] = frozenset()) -> dict[str, str]:
    """Each dispatched partition's devicefit/device tag (its physical device on its host). A
    device of this host is resolved here; another host's must be known, as a registered device
    (`registered`: the store's, whose record names its host) or a device partition its worker
    added (`partitioned`, the instance's "devices"): a device id nobody serves is refused by
    name rather than waited on."""
    known = {str(d.get("id")): d for d in registered}
    out: dict[str, str] = {}
    for key in partition_keys:
        device = split_partition_key(key)[0]
        try:
            target = resolve_local(device, inventory)
            out[key] = device_tag(target.kind, host_of_inventory(inventory), is_software_device(target.kind, inventory))
        except DeviceUnavailable:
            if device not in partitioned and device not in known:
                raise DeviceUnavailable(f"device {device} is neither on this host nor registered: start `devicefit worker --device "
                                        f"{device}` on its host (`devicefit devices list` shows the registered ones)") from None
            record = known.get(device) or {}
            fingerprint = split_device_id(device)[0]  # a device id names its kind and its hardware
            out[key] = device_tag(record.get("kind") or fingerprint.split("-", 1)[0], record.get("host_fingerprint") or fingerprint)
    return out
