"""The generation scenario's report figures: time to first token and time per output token per
device, and where a request's memory goes (weights, KV cache, activations, the process itself)
against the measured peak. Pure builders like the rest of devicefit.reports.figures: ReportData
in, a Figure out, or None when nothing was measured in the generation scenario."""
from __future__ import annotations

from typing import Any

from devicefit.reports.data import ReportData, hardware_label
from devicefit.shown_text import plotly_text

MIB = 2**20


def _generation_rows(data: ReportData) -> list[dict[str, Any]]:
    return [r for r in data.aggregates if r["mode"] == "generation" and r.get("tpot_p50_ms")]


def _label(r: dict[str, Any]) -> str:
    return plotly_text(f"{r['model']} · b{r['batch_size']} · {r['precision']}")


def _hover(r: dict[str, Any]) -> str:
    ci = r.get("worst_ci_rel_half_width")
    return (f"{plotly_text(r['model'])} · {plotly_text(hardware_label(r))} · {r['precision']} · batch {r['batch_size']} · "
            f"{plotly_text(r['input_dims'])}<br>"
            f"TTFT {r.get('ttft_ms') or 0:.1f} ms, TPOT p50 {r['tpot_p50_ms']:.2f} ms (p90 {r.get('tpot_p90_ms') or 0:.2f}), "
            f"decode {r.get('decode_tokens_per_s') or 0:.1f} tokens/s<br>request p50 {r['p50_ms']:.1f} ms, {r['runs']} run(s)"
            + ("" if ci is None else f", 95% CI ±{100 * ci:.1f}%") + f", {plotly_text(r.get('device_name') or '')} ({plotly_text(r.get('hostname'))})")


def generation_latency(data: ReportData):
    """TTFT and TPOT (p50, with p90 as the error bar) per model, batch and precision, one bar per
    device: log scale, since a GPU and a CPU differ by tens of times."""
    rows = _generation_rows(data)
    if not rows:
        return None
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=1, cols=2, subplot_titles=("time to first token (ms)", "time per output token, p50 (ms; bar to p90)"))
    for hw in sorted({hardware_label(r) for r in rows}):
        sel = sorted((r for r in rows if hardware_label(r) == hw), key=lambda r: (r["model"], r["batch_size"], r["precision"]))
        x = [_label(r) for r in sel]
        hover = [_hover(r) for r in sel]
        fig.add_bar(name=plotly_text(hw), legendgroup=hw, x=x, y=[r["ttft_ms"] for r in sel], hovertext=hover, hoverinfo="text", row=1, col=1)
        fig.add_bar(name=plotly_text(hw), legendgroup=hw, showlegend=False, x=x, y=[r["tpot_p50_ms"] for r in sel], hovertext=hover,
                    hoverinfo="text", error_y={"type": "data", "symmetric": False, "array": [
                        max((r.get("tpot_p90_ms") or r["tpot_p50_ms"]) - r["tpot_p50_ms"], 0) for r in sel], "arrayminus": [0] * len(sel)},
                    row=1, col=2)
    fig.update_yaxes(type="log")
    fig.update_layout(title="Generation measured per device: TTFT and TPOT (prompt and new tokens in each point's input)",
                      barmode="group", legend_title="hardware · backend")
    return fig


BREAKDOWN_PARTS = (("breakdown_process_bytes", "process (runtime, libraries)"), ("breakdown_weights_bytes", "weights"),
                   ("kv_cache_bytes", "KV cache (config arithmetic)"), ("breakdown_activation_bytes", "prefill activations (meta trace)"),
                   ("breakdown_expert_copy_bytes", "decode expert copies (a GPU's batched_mm)"))


def memory_breakdown(data: ReportData):
    """Per generation config, the estimate's parts stacked (process, weights, KV cache, prefill
    activations) beside the measured peak (a marker): how far the sum of named parts explains
    the measurement, and which part grows with the batch and the context."""
    rows = [r for r in _generation_rows(data) if r.get("breakdown_measured_peak_bytes")]
    if not rows:
        return None
    from plotly import graph_objects as go

    rows = sorted(rows, key=lambda r: (r["model"], hardware_label(r), r["batch_size"], r["precision"], r["input_dims"]))
    x = [f"{_label(r)} · {plotly_text(hardware_label(r))}" for r in rows]
    fig = go.Figure()
    for field, name in BREAKDOWN_PARTS:
        fig.add_bar(name=name, x=x, y=[(r.get(field) or 0) / MIB for r in rows], hoverinfo="y+name")
    fig.add_scatter(name="measured peak", x=x, y=[r["breakdown_measured_peak_bytes"] / MIB for r in rows], mode="markers",
                    marker={"symbol": "diamond", "size": 11, "color": "black"}, hovertext=[_hover(r) for r in rows], hoverinfo="text+y")
    fig.update_layout(title="Generation memory: the estimate's parts against the measured peak (host RSS on a CPU, "
                            "the allocator's allocated peak on a GPU)", barmode="stack", yaxis_title="MiB", legend_title="part")
    return fig
