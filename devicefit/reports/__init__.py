"""Reports: plotly figures and a dashboard, spec 004's comparative analysis and
recommendations, and regression tracking against earlier runs or exported baselines."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from devicefit.paths import DataPaths

DEFAULT_REGRESSION_THRESHOLD = 0.1


@dataclass
class PublishedReports:
    analysis_csv: Path
    recommendations: Path
    dashboard: Any  # dashboard.ReportOutput


def reports_dir(paths: DataPaths) -> Path:
    return paths.outputs / "reports"


def publish_reports(paths: DataPaths, directory: Path | None = None, png: bool = True, data=None) -> PublishedReports:
    """The comparative analysis CSV, the recommendations and the figure dashboard, from the store."""
    from devicefit.reports.analysis import write_analysis_csv, write_recommendations
    from devicefit.reports.dashboard import write_report
    from devicefit.reports.data import load_report_data

    data = data or load_report_data(paths)  # data: read by the caller (the pipeline, through its resource)
    csv_path = write_analysis_csv(data.aggregates, paths.outputs / "comparative_analysis.csv")
    recs = write_recommendations(data.aggregates, paths.outputs / "recommendations.json")
    dashboard = write_report(data, directory or reports_dir(paths), png=png,
                             extras={"comparative analysis (CSV)": csv_path, "recommendations (JSON)": recs,
                                     "regression report (JSON)": regression_report_path(paths)})
    return PublishedReports(csv_path, recs, dashboard)


def regression_report_path(paths: DataPaths) -> Path:
    return paths.outputs / "regression_report.json"


def publish_regression_report(paths: DataPaths, threshold: float = DEFAULT_REGRESSION_THRESHOLD, con=None) -> dict[str, Any]:
    """Each config's latest run against its previous run in the store (the nightly check)."""
    from devicefit.reports import regression
    from devicefit.results_io import write_json_atomic

    source = paths.database if con is None else con  # con: the pipeline's DuckDBResource connection
    current = regression.current_sets(source)
    description, baseline = regression.load_baseline("previous", source, current)
    comparisons = regression.compare(current, baseline, threshold)
    report = regression.regression_report(comparisons, threshold, regression.DEFAULT_ALPHA, description, "latest run of each config")
    write_json_atomic(regression_report_path(paths), report)
    return report
