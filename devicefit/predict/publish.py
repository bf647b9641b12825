"""Train the predictors on a store's measurements and publish the artifact: the one sequence the
pipeline's `predictors` asset (devicefit.pipeline.train_predictors) and the Python API's
`train_prediction_models` (devicefit.predict.api) both run."""
from __future__ import annotations

from typing import Any, Callable

from devicefit import store
from devicefit.paths import DataPaths


def train_and_publish(paths: DataPaths, local: dict[str, Any], connect: Callable[[], Any] | None = None,
                      rows: list[dict[str, Any]] | None = None, publish_to: DataPaths | None = None) -> dict[str, Any]:
    """Train on every measured row of the store at `paths` (or on `rows`), validate on held-out
    models, publish under `publish_to` (default `paths`) and record the version in the store.
    `local`: this host's detection (JSON), whose devices stand in for kinds the fleet has not
    registered; `connect`: a context-manager factory for the store (the pipeline's
    DuckDBResource), opened to read and again to record: the lock is not held while training."""
    from devicefit.fleet.inventory import read_fleet_inventory
    from devicefit.fleet.partitions import hardware_of_inventory, host_of_inventory
    from devicefit.predict import artifacts
    from devicefit.predict.hardware_specs import training_specs
    from devicefit.predict.training import train

    with (connect() if connect else store.opened(paths.database, read_only=True)) as con:
        hardware = store.read_hardware_rows(con)
        if rows is None:
            rows = store.read_ok_measurements(con)
        fleet = read_fleet_inventory(con, host_of_inventory(local), hardware_of_inventory(local))
    # A kind's spec comes from the fleet's registered device of it (a GPU box's probe, not a
    # datasheet) once one is registered; a store with no devices yet falls back to this host's.
    registered = any(p["available"] for p in fleet["platforms"].values())
    specs, local_host = training_specs(rows, hardware, fleet if registered else local)
    artifact = train(rows, specs, local_host, hardware_of_inventory(local))
    target = publish_to or paths
    if connect and target == paths:
        with connect() as con:
            artifacts.save(target, artifact, con=con)
    else:
        artifacts.save(DataPaths(target.root, paths.database), artifact)  # the version is recorded in the store trained on
    return artifact
