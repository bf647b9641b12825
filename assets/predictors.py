"""Predictors retrained whenever benchmark_results changes, and the prediction matrix."""
from dataclasses import asdict

import dagster as dg
import polars as pl
from dagster_duckdb import DuckDBResource

from assets.automation import EAGER
from assets.metadata import OWNERS, rows_table
from assets.resources import DevicefitData, same_store
from assets.results import benchmark_results, training_frame
from assets.store_tables import StoreTablesManager
from benchmark_runners.hardware import detect_hardware
from devicefit import store
from devicefit.pipeline import publish_prediction_matrix, train_predictors, validate_served_predictions
from devicefit.predict.matrix import count_by_source
from devicefit.predict.training import ERROR_BARS, TARGETS, InsufficientData
from devicefit.predict.validation_report import HELD_OUT_DEVICE_BAR, ErrorMetrics, ValidationReport, held_out_cpu_devices

PREDICTOR_KEYS = {t: f"{t}_predictor" for t in TARGETS}
METRIC_COLUMNS = ["group", "mape", "median_ape", "within_10pct", "n"]


def _metrics_rows(groups: dict[str, ErrorMetrics]) -> list[dict]:
    return [{"group": g, **asdict(m)} for g, m in groups.items()]


@dg.multi_asset(
    specs=[dg.AssetSpec(key, deps=[training_frame], group_name="prediction", automation_condition=EAGER, skippable=True,
                        kinds={"lightgbm"}, owners=OWNERS,
                        description=f"LightGBM {t} regressor, validated on held-out models") for t, key in PREDICTOR_KEYS.items()],
    pool="duckdb_writer",
)
def predictors(context: dg.AssetExecutionContext, devicefit_data: DevicefitData, duckdb: DuckDBResource,
               store_tables: dg.ResourceParam[StoreTablesManager], training_frame: pl.DataFrame):
    try:
        # reads the devices, then records the published version; not held while training
        artifact = train_predictors(same_store(devicefit_data, duckdb, store_tables), detect_hardware(probe=False), duckdb.get_connection,
                                    rows=store.rows_of(training_frame))
    except InsufficientData as exc:
        context.log.warning(f"predictors not retrained: {exc}")  # the published predictor, if any, stays
        return
    validation = ValidationReport.of(artifact)
    for t, key in PREDICTOR_KEYS.items():
        v = validation.targets[t]
        lomo = v.leave_one_model_out
        yield dg.MaterializeResult(asset_key=key, metadata={
            "version": artifact["version"],
            "rows": artifact["rows"],
            "models": len(artifact["models"]),
            "held_out_mape": lomo.mape,
            "held_out_median_ape": lomo.median_ape,
            "held_out_within_10pct": lomo.within_10pct,
            "bar_mape": ERROR_BARS[t],
            "interval_level": validation.level,
            "interval_coverage": v.interval_coverage,
            "per_family": rows_table(_metrics_rows(v.per_family), METRIC_COLUMNS),
            "per_hardware": rows_table(_metrics_rows(v.per_hardware), METRIC_COLUMNS),
            **({"held_out_device": rows_table(_metrics_rows(v.leave_one_hardware_out_per_device), METRIC_COLUMNS)}
               if v.leave_one_hardware_out_per_device else {}),
            **({"held_out_machine": rows_table(_metrics_rows(v.leave_one_machine_out_per_device), METRIC_COLUMNS)}
               if v.leave_one_machine_out_per_device else {}),
        })


@dg.asset(deps=list(PREDICTOR_KEYS.values()), group_name="prediction", automation_condition=EAGER, kinds={"json"}, owners=OWNERS,
          description="Spec 001 prediction matrix (default models x hardware x batch sizes x precisions), data/outputs/.")
def prediction_matrix(devicefit_data: DevicefitData) -> dg.MaterializeResult:
    path, matrix = publish_prediction_matrix(devicefit_data.paths())
    return dg.MaterializeResult(metadata={"path": dg.MetadataValue.path(path),
                                          "predictions_by_source": dg.MetadataValue.json(count_by_source(matrix)),
                                          "unpredictable": dg.MetadataValue.json(matrix["unpredictable"])})


@dg.asset(deps=[benchmark_results], group_name="prediction", pool="duckdb_writer", automation_condition=EAGER,
          kinds={"duckdb"}, owners=OWNERS,
          description="Served predictions (API, matrix) against measurements taken after them: the predictors' real error.")
def prediction_validation(devicefit_data: DevicefitData, duckdb: DuckDBResource) -> dg.MaterializeResult:
    paths = same_store(devicefit_data, duckdb)
    with duckdb.get_connection() as con:
        loaded, by_source = validate_served_predictions(paths, con)
    return dg.MaterializeResult(metadata={
        "predictions_loaded": loaded,
        "matched_with_later_measurements": sum(r["n"] for r in by_source),
        "error_by_source": rows_table(by_source, ["source", "n", "latency_mape", "throughput_mape", "memory_mape"])
        if by_source else dg.MetadataValue.text("no served prediction has been measured since"),
    })


def _bar_check(target: str):
    @dg.asset_check(asset=PREDICTOR_KEYS[target], name=f"{target}_held_out_error_within_bar",
                    description=f"Leave-one-model-out MAPE of the {target} predictor is at most {ERROR_BARS[target]:.0%}, "
                                "overall and on each measured machine's rows.")
    def check(devicefit_data: DevicefitData) -> dg.AssetCheckResult:
        from devicefit.predict import artifacts

        artifact = artifacts.load_current(devicefit_data.paths())
        v = ValidationReport.of(artifact).targets[target]
        lomo = v.leave_one_model_out
        over = v.failures()
        return dg.AssetCheckResult(passed=v.within_bar,
                                   description=f"held-out MAPE {lomo.mape:.1%} (bar {v.bar_mape:.0%}) over {lomo.n} rows"
                                   + (f"; over the bar: {', '.join(over)}" if over else ""),
                                   metadata={"mape": lomo.mape, "version": artifact["version"],
                                             **{f"mape[{h}]": m.mape for h, m in v.per_host.items()}})

    return check


COVERAGE_TOLERANCE = 0.05  # measured coverage of the intervals within 5 points of their nominal level


def _coverage_check(target: str):
    @dg.asset_check(asset=PREDICTOR_KEYS[target], name=f"{target}_interval_coverage_near_nominal",
                    description=f"The {target} intervals cover held-out measurements within {COVERAGE_TOLERANCE:.0%} "
                                "of their nominal level.")
    def check(devicefit_data: DevicefitData) -> dg.AssetCheckResult:
        from devicefit.predict import artifacts

        artifact = artifacts.load_current(devicefit_data.paths())
        validation = ValidationReport.of(artifact)
        level, coverage = validation.level, validation.targets[target].interval_coverage
        return dg.AssetCheckResult(passed=coverage is not None and abs(coverage - level) <= COVERAGE_TOLERANCE,
                                   description=f"held-out coverage {coverage:.1%} of nominal {level:.0%}" if coverage is not None
                                   else "no held-out residuals to measure coverage on",
                                   metadata={"coverage": coverage, "nominal": level, "version": artifact["version"]})

    return check


def _held_out_device_check():
    @dg.asset_check(asset=PREDICTOR_KEYS["latency"], name="latency_held_out_cpu_device_within_bar",
                    description=f"Leave-one-device-out latency MAPE of each held-out CPU device (a constraint profile of a "
                                f"CPU, or another host's CPU) is at most {HELD_OUT_DEVICE_BAR:.0%}: the predictor trained "
                                "without that device's rows, answering from its probe alone.")
    def check(devicefit_data: DevicefitData) -> dg.AssetCheckResult:
        from devicefit.predict import artifacts

        artifact = artifacts.load_current(devicefit_data.paths())
        per_device = held_out_cpu_devices(ValidationReport.of(artifact).targets["latency"])
        if not per_device:
            return dg.AssetCheckResult(passed=True, description="fewer than two CPU devices measured: no device to hold out",
                                       metadata={"version": artifact["version"]})
        over = [f"{d} {m.mape:.1%}" for d, m in per_device.items() if m.mape > HELD_OUT_DEVICE_BAR]
        return dg.AssetCheckResult(passed=not over,
                                   description=", ".join(f"{d} {m.mape:.1%} (n={m.n})" for d, m in per_device.items())
                                   + f"; bar {HELD_OUT_DEVICE_BAR:.0%}" + (f"; over: {', '.join(over)}" if over else ""),
                                   metadata={"version": artifact["version"], **{f"mape[{d}]": m.mape for d, m in per_device.items()}})

    return check


PREDICTOR_CHECKS = [_bar_check(t) for t in TARGETS] + [_coverage_check(t) for t in TARGETS] + [_held_out_device_check()]
