"""Reports downstream of the results and the predictors (dashboard, comparative analysis,
recommendations), and the regression report with its check against each config's previous run."""
import json

import dagster as dg
import polars as pl
from dagster_duckdb import DuckDBResource

from assets.automation import EAGER
from assets.metadata import OWNERS, rows_table
from assets.predictors import PREDICTOR_KEYS
from assets.resources import DevicefitData, same_store
from assets.results import benchmark_results
from assets.store_tables import StoreTablesManager
from devicefit import store
from devicefit.reports import DEFAULT_REGRESSION_THRESHOLD, publish_regression_report, publish_reports, regression_report_path
from devicefit.reports.data import load_report_data


class ReportConfig(dg.Config):
    png: bool = True  # rendered only where kaleido finds a Chromium binary; the reason is shown otherwise


# Readers of the store: in the writer pool (never beside another process's write), read-only.
@dg.asset(deps=[*PREDICTOR_KEYS.values()], group_name="reports", automation_condition=EAGER, pool="duckdb_writer",
          kinds={"plotly", "html", "csv"}, owners=OWNERS,
          description="Plotly dashboard (data/outputs/reports/index.html), comparative_analysis.csv and recommendations.json.")
def benchmark_reports(config: ReportConfig, devicefit_data: DevicefitData, duckdb_reader: DuckDBResource,
                      store_tables: dg.ResourceParam[StoreTablesManager], aggregated_results: pl.DataFrame) -> dg.MaterializeResult:
    paths = same_store(devicefit_data, duckdb_reader, store_tables)
    with duckdb_reader.get_connection() as con:  # the devices and inputs; then render without holding the store
        data = load_report_data(paths, con, aggregates=store.rows_of(aggregated_results))
    published = publish_reports(devicefit_data.paths(), png=config.png, data=data)
    d = published.dashboard
    return dg.MaterializeResult(metadata={
        "dashboard": dg.MetadataValue.url(d.index.resolve().as_uri()),
        "dashboard_path": dg.MetadataValue.path(str(d.index)),
        "figures": dg.MetadataValue.md("\n".join(f"- [{name}]({path.resolve().as_uri()})" for name, path in d.html.items())),
        "not_drawn": dg.MetadataValue.json(d.missing),
        "png": dg.MetadataValue.text(d.png_unavailable or f"{len(d.png)} rendered"),
        "comparative_analysis": dg.MetadataValue.path(str(published.analysis_csv)),
        "recommendations": dg.MetadataValue.path(str(published.recommendations)),
    })


@dg.asset(deps=[benchmark_results], group_name="reports", automation_condition=EAGER, kinds={"json"}, owners=OWNERS, pool="duckdb_writer",
          description="Each config's latest run against its previous run (Mann-Whitney on raw samples + "
                      f"{DEFAULT_REGRESSION_THRESHOLD:.0%} threshold), data/outputs/regression_report.json.")
def regression_report(devicefit_data: DevicefitData, duckdb_reader: DuckDBResource) -> dg.MaterializeResult:
    paths = same_store(devicefit_data, duckdb_reader)
    with duckdb_reader.get_connection() as con:
        report = publish_regression_report(paths, con=con)
    # the changes, and any comparison with a note (two rows measured with different allocator settings)
    changed = [c for c in report["comparisons"] if c["verdict"] in ("regression", "improvement", "inconclusive") or c.get("note")]
    return dg.MaterializeResult(metadata={
        "path": dg.MetadataValue.path(str(regression_report_path(devicefit_data.paths()))),
        "status": report["status"], **{k: v for k, v in report["summary"].items()},
        "changes": rows_table(changed, ["config", "verdict", "baseline_p50_ms", "current_p50_ms", "change", "p_value", "note"])
        if changed else dg.MetadataValue.text("none"),
    })


@dg.asset_check(asset=regression_report, description="No config got slower than its previous run (rank test and threshold).")
def no_performance_regression(devicefit_data: DevicefitData) -> dg.AssetCheckResult:
    regression_report = json.loads(regression_report_path(devicefit_data.paths()).read_text())
    regressed = [c for c in regression_report["comparisons"] if c["verdict"] == "regression"]
    return dg.AssetCheckResult(
        passed=not regressed, severity=dg.AssetCheckSeverity.WARN,
        description=f"{len(regressed)} regression(s) against {regression_report['baseline']}" if regressed
        else f"no regression among {regression_report['summary']['unchanged'] + regression_report['summary']['improvement']} "
             f"configs compared ({regression_report['summary']['new']} without a previous run)",
        metadata={"regressions": dg.MetadataValue.json([{k: c[k] for k in ("config", "baseline_p50_ms", "current_p50_ms", "change", "p_value")}
                                                        for c in regressed])})
