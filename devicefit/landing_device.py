"""A device record a worker writes beside the landing files (raw/devices/<id>.json), checked as
the `devices` table holds it, with the landing format's own types (devicefit/landing_schema.py):
the single writer registers the device a worker serves before any of its rows arrive."""
from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, ValidationError, model_validator

from benchmark_runners.constraints import parse_profile_slug, profile_slug
from benchmark_runners.hardware.inventory import FINGERPRINT
from devicefit.landing_schema import (
    HardwareProbe,
    JsonObject,
    LandingFileError,
    Text,
    _Open,
    _Strict,
    describe,
    parse_timestamp,
)


class DeviceProfileJson(_Strict):
    threads: Annotated[int, Field(ge=1, le=4096)] | None = None
    isa: Text | None = None


class DeviceRecord(_Open):
    """A device description a worker writes beside the landing files (raw/devices/<id>.json) so
    the single writer registers the device it serves before any of its rows arrive."""
    id: Annotated[str, Field(pattern=rf"^{FINGERPRINT}(\+[a-z0-9-]{{1,40}})?$")]
    kind: Text
    name: Text | None = None
    hostname: Text | None = None
    host_fingerprint: Text | None = None
    hardware_fingerprint: Text
    profile: DeviceProfileJson = Field(default_factory=DeviceProfileJson)
    details: JsonObject | None = None
    probe: HardwareProbe | None = None
    registered_at: Text | None = None

    @model_validator(mode="after")
    def _consistent(self):
        from benchmark_runners import registry

        if self.kind not in registry.kind_names():
            raise ValueError(f"unknown device kind {self.kind!r}")
        slug = profile_slug(self.profile.threads, self.profile.isa)
        parse_profile_slug(slug)  # an ISA cap devicefit does not know is not a profile
        if self.id != (f"{self.hardware_fingerprint}+{slug}" if slug else self.hardware_fingerprint):
            raise ValueError(f"id {self.id!r} is not its hardware fingerprint and profile ({self.hardware_fingerprint!r}, {slug!r})")
        if self.registered_at is not None:
            parse_timestamp(self.registered_at)
        return self


def validated_device(document: Any, what: str) -> dict[str, Any]:
    """A device record checked as the `devices` table holds it; LandingFileError names the problem."""
    if not isinstance(document, dict):
        raise LandingFileError(f"{what}: expected a JSON object, got {type(document).__name__}")
    try:
        DeviceRecord.model_validate(document)
    except ValidationError as exc:
        raise LandingFileError(f"{what}: {describe(exc)}") from None
    return document
