"""Plotly figures of a prediction matrix (spec 001's visualizations), written as HTML. Every
trace says where its numbers came from: marker symbols and hover text carry the `source`."""
from __future__ import annotations

from pathlib import Path
from typing import Any

SOURCE_SYMBOLS = {"trained_predictor": "circle", "roofline_calibrated": "diamond", "static_rule": "x"}


def matrix_figures(matrix: dict[str, Any]) -> dict[str, Any]:
    import plotly.graph_objects as go

    from devicefit.predict.matrix import matrix_entries

    rows = matrix_entries(matrix)
    if not rows:
        raise ValueError("the prediction matrix holds no predictions to plot")
    figures = {}
    batch = min(r["batch"] for r in rows)
    precision = matrix["precision_options"][0]
    fig = go.Figure()
    for hw in matrix["hardware_platforms"]:
        sel = [r for r in rows if r["hardware"] == hw and r["batch"] == batch and r["precision"] == precision]
        if sel:
            fig.add_bar(name=hw, x=[r["model"] for r in sel], y=[r["latency_mean"] for r in sel],
                        hovertext=[r["source"] for r in sel],
                        error_y={"type": "data", "symmetric": False,
                                 "array": [r["latency_interval"][1] - r["latency_mean"] if r["latency_interval"] else 0 for r in sel],
                                 "arrayminus": [r["latency_mean"] - r["latency_interval"][0] if r["latency_interval"] else 0 for r in sel]})
    fig.update_layout(title=f"Predicted latency per batch by hardware (batch {batch}, {precision}, {matrix['mode']}; whiskers: 90% interval)",
                      xaxis_title="model", yaxis_title="latency per batch (ms, log scale)", yaxis_type="log", barmode="group",
                      legend_title="hardware")
    figures["hardware_comparison"] = fig
    fig = go.Figure()
    for r0 in {(r["model"], r["hardware"]) for r in rows if r["precision"] == precision}:
        sel = sorted((r for r in rows if (r["model"], r["hardware"]) == r0 and r["precision"] == precision), key=lambda r: r["batch"])
        fig.add_scatter(name=f"{r0[0]} on {r0[1]}", x=[r["batch"] for r in sel], y=[r["throughput"] for r in sel], mode="lines+markers",
                        marker_symbol=[SOURCE_SYMBOLS.get(r["source"], "circle") for r in sel], hovertext=[r["source"] for r in sel])
    fig.update_layout(title=f"Predicted throughput vs batch size ({precision}; circle = trained, diamond = calibrated roofline, x = static rule)",
                      xaxis_title="batch size", yaxis_title="throughput (samples/s)", xaxis_type="log", yaxis_type="log")
    figures["batch_scaling"] = fig
    fig = go.Figure()
    for p in matrix["precision_options"]:
        sel = [r for r in rows if r["precision"] == p and r["batch"] == batch]
        fig.add_bar(name=p, x=[f"{r['model']} / {r['hardware']}" for r in sel], y=[r["memory_usage"] for r in sel],
                    hovertext=[r["source"] for r in sel])
    fig.update_layout(title=f"Predicted peak memory by precision (batch {batch})", xaxis_title="model / hardware",
                      yaxis_title="peak memory (MiB)", barmode="group", legend_title="precision")
    figures["precision_memory"] = fig
    return figures


def write_matrix_figures(matrix: dict[str, Any], output_dir: str | Path) -> list[str]:
    """HTML files (plotly.js written once beside them, so they open without a network)."""
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, fig in matrix_figures(matrix).items():
        path = out / f"{name}.html"
        fig.write_html(str(path), include_plotlyjs="directory")
        paths.append(str(path))
    return paths
