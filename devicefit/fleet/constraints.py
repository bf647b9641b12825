"""Constraint profiles: how users really deploy on a device, applied before anything runs on it.

A profile limits a CPU the way a deployment does: a 1-core container (`threads=1`), or an older
fleet host's instruction set (`isa=avx2`). The ISA cap is three environment variables read at
library load (oneDNN's dispatcher, ATen's kernel choice, MKL's), so a profile is applied to a
*new process* (the probe, a worker), never to a process that has imported torch already."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from benchmark_runners.constraints import ISA_CAPS, parse_profile_slug, profile_env, profile_slug
from devicefit.errors import DevicefitError

__all__ = ["ISA_CAPS", "PROFILE_KINDS", "BadProfile", "ConstraintProfile"]

# What a profile is applied to: torch on the CPU reads these variables. OpenVINO's CPU plugin
# takes its threads from its own properties and ships its own oneDNN, so a profile there would
# be unverified; it is refused until the OpenVINO backend applies one.
PROFILE_KINDS = ("cpu",)


class BadProfile(DevicefitError, ValueError):
    """A constraint profile that cannot be applied here (said with the reason)."""


@dataclass(frozen=True)
class ConstraintProfile:
    threads: int | None = None  # compute threads (OpenMP, MKL, torch intra-op); None: the device's default
    isa: str | None = None  # an ISA_CAPS key; None: whatever the CPU has

    def __post_init__(self):
        if self.threads is not None and (isinstance(self.threads, bool) or not isinstance(self.threads, int) or self.threads < 1):
            raise BadProfile(f"threads must be a positive integer, got {self.threads!r}")
        if self.isa is not None and self.isa not in ISA_CAPS:
            raise BadProfile(f"unknown ISA cap {self.isa!r}; known: {', '.join(ISA_CAPS)}")

    @property
    def empty(self) -> bool:
        return self.threads is None and self.isa is None

    def slug(self) -> str:
        """The profile's part of a device id: "t1", "avx2", "t1-avx2"; "" for none."""
        return profile_slug(self.threads, self.isa)

    def env(self) -> dict[str, str]:
        """The environment a process needs to run under this profile (set before it starts)."""
        return profile_env(self.threads, self.isa)

    def to_json(self) -> dict[str, Any]:
        return {"threads": self.threads, "isa": self.isa}

    @classmethod
    def from_json(cls, d: dict[str, Any] | None) -> "ConstraintProfile":
        return cls(**{k: (d or {}).get(k) for k in ("threads", "isa")})

    @classmethod
    def parse_slug(cls, slug: str) -> "ConstraintProfile":
        try:
            threads, isa = parse_profile_slug(slug)
        except ValueError as exc:
            raise BadProfile(str(exc)) from None
        return cls(threads, isa)

    def check_applies(self, kind: str, device: dict[str, Any]) -> None:
        """Refuse what the device cannot honour: a profile on a GPU, more threads than the
        device has, an ISA it lacks."""
        if self.empty:
            return
        if kind not in PROFILE_KINDS:
            raise BadProfile(f"a constraint profile applies to {', '.join(PROFILE_KINDS)} devices for now, not {kind}")
        cores = device.get("logical_cores") or device.get("physical_cores")
        if self.threads and cores and self.threads > cores:
            raise BadProfile(f"{self.threads} threads on a device with {cores} logical cores is not a constraint")
        usable = device.get("usable_cpus")  # a cpuset or cgroup quota leaves this process fewer (hardware/cpu_budget.py)
        if self.threads and usable and self.threads > usable:
            raise BadProfile(f"{self.threads} threads where this process may use {usable:g} CPUs (its cpuset or cgroup "
                             f"CPU quota) is oversubscription, not a constraint")
        if self.isa and ISA_CAPS[self.isa]["flag"] not in (device.get("isa_flags") or []):
            raise BadProfile(f"this CPU has no {self.isa} ({ISA_CAPS[self.isa]['flag']} is not among its flags "
                             f"{device.get('isa_flags')}): an {self.isa} cap would describe hardware that is not here")
