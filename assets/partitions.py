"""Partitions of the measurements: (device, model), both dynamic.

Devices register at run time (a host's worker, `devicefit devices register`, rows loaded from
another machine) and models too (a local model directory an operator registers), so both
dimensions are Dagster dynamic partitions: a new host or model is a new partition key, with no
code change. Keys read "<device id>|<model>" (devicefit.fleet.partitions). Partitions are added
by `devicefit run` for what it measures and by the `register_partitions` sensor for every
registered device and known model."""
from __future__ import annotations

import dagster as dg

from devicefit.fleet.partitions import split_partition_key

DEVICES = dg.DynamicPartitionsDefinition(name="devices")
MODELS = dg.DynamicPartitionsDefinition(name="models")
measurement_partitions = dg.MultiPartitionsDefinition({"device": DEVICES, "model": MODELS})


def missing_partitions(instance: dg.DagsterInstance, devices: list[str], models: list[str]) -> dict[str, list[str]]:
    """Of these devices and models, the ones the instance does not hold yet, per dimension."""
    out = {}
    for definition, wanted in ((DEVICES, devices), (MODELS, models)):
        held = set(instance.get_dynamic_partitions(definition.name))
        out[definition.name] = [k for k in dict.fromkeys(wanted) if k not in held]
    return out


def add_partitions_for(instance: dg.DagsterInstance, partition_keys: list[str]) -> None:
    """Make every "<device>|<model>" key a partition of the instance before a run asks for it."""
    pairs = [split_partition_key(k) for k in partition_keys]
    for name, keys in missing_partitions(instance, [d for d, _ in pairs], [m for _, m in pairs]).items():
        if keys:
            instance.add_dynamic_partitions(name, keys)
