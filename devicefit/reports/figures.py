"""The report's plotly figures, one pure builder each: ReportData in, a Figure out (or None when
the data holds nothing that figure could show, which the dashboard says in words). Titles name
the config a figure fixes, axes carry units, and hover text carries each point's provenance
(runs, CI, host) so a reader can judge a number without the code."""
from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

from devicefit.predict.memory_model import memory_target
from devicefit.reports.data import ReportData, hardware_label
from devicefit.reports.generation_figures import generation_latency, memory_breakdown
from devicefit.shown_text import plotly_text as _t

MIB = 2**20


def _go():
    import plotly.graph_objects as go

    return go


def _palette() -> list[str]:
    """Enough distinct colours that no two lines of a figure share one (up to 26)."""
    from plotly.colors import qualitative

    return qualitative.Dark24 + qualitative.Light24


def _hover(r: dict[str, Any]) -> str:
    ci = r.get("worst_ci_rel_half_width")
    return (f"{_t(r['model'])} · {_t(hardware_label(r))} · {r['precision']} · {r['mode']} · batch {r['batch_size']}<br>"
            f"p50 {r['p50_ms']:.2f} ms, {r['throughput_samples_per_s']:.1f} samples/s, "
            f"peak RSS {(r.get('peak_rss_bytes') or 0) / MIB:.0f} MiB<br>"
            f"{r['runs']} run(s)" + ("" if ci is None else f", 95% CI ±{100 * ci:.1f}%") + f", {_t(r.get('device_name') or '')} ({_t(r.get('hostname'))})")


def _inference_fp32(data: ReportData) -> list[dict[str, Any]]:
    return [r for r in data.at_default_input() if r["mode"] == "inference" and r["precision"] == "fp32"]


def hardware_comparison(data: ReportData):
    """Throughput per model on every measured hardware/backend at the smallest common batch."""
    rows = _inference_fp32(data)
    if not rows:
        return None
    go = _go()
    batch = min(r["batch_size"] for r in rows)
    rows = [r for r in rows if r["batch_size"] == batch]
    fig = go.Figure()
    for hw in sorted({hardware_label(r) for r in rows}):
        sel = sorted((r for r in rows if hardware_label(r) == hw), key=lambda r: r["model"])
        fig.add_bar(name=_t(hw), x=[_t(r["model"]) for r in sel], y=[r["throughput_samples_per_s"] for r in sel],
                    hovertext=[_hover(r) for r in sel], hoverinfo="text")
    fig.update_layout(title=f"Measured inference throughput by hardware (fp32, batch {batch})", barmode="group",
                      xaxis_title="model", yaxis_title="throughput (samples/s, log scale)", yaxis_type="log",
                      legend_title="hardware · backend")
    return fig


def batch_scaling(data: ReportData):
    """Throughput and latency against batch size, one line per model and hardware."""
    rows = _inference_fp32(data)
    series = _series(rows, lambda r: (r["model"], hardware_label(r)))
    series = {k: v for k, v in series.items() if len(v) > 1}
    if not series:
        return None
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=1, cols=2, subplot_titles=("throughput (samples/s)", "latency per batch (ms, p50)"))
    palette = _palette()
    for i, ((model, hw), sel) in enumerate(sorted(series.items())):
        name = _t(f"{model} · {hw}")
        colour = palette[i % len(palette)]  # the same series has the same colour in both panels
        common = {"x": [r["batch_size"] for r in sel], "mode": "lines+markers", "legendgroup": name,
                  "hovertext": [_hover(r) for r in sel], "hoverinfo": "text", "line": {"color": colour},
                  "marker": {"color": colour}}
        fig.add_scatter(name=name, y=[r["throughput_samples_per_s"] for r in sel], row=1, col=1, **common)
        fig.add_scatter(name=name, y=[r["p50_ms"] for r in sel], row=1, col=2, showlegend=False, **common)
    fig.update_xaxes(title_text="batch size (log scale)", type="log")
    fig.update_yaxes(type="log")
    fig.update_yaxes(title_text="samples/s (log scale)", row=1, col=1)
    fig.update_yaxes(title_text="ms (log scale)", row=1, col=2)
    fig.update_layout(title="Measured batch-size scaling (fp32 inference)", legend_title="model · hardware")
    return fig


def efficiency_vs_cpu(data: ReportData):
    """Speedup against the same host's CPU running torch fp32 at the same batch and input."""
    rows = [r for r in data.at_default_input() if r.get("speedup_vs_cpu_fp32") is not None and r["mode"] == "inference"]
    rows = [r for r in rows if not (r["device_kind"] == "cpu" and r["backend"] == "torch" and r["precision"] == "fp32")]
    if not rows:
        return None
    go = _go()
    models = sorted({r["model"] for r in rows})
    columns = sorted({f"{hardware_label(r)} {r['precision']} b{r['batch_size']}" for r in rows},
                     key=lambda c: (c.split(" b")[0], int(c.rsplit(" b", 1)[1])))
    cell = {(r["model"], f"{hardware_label(r)} {r['precision']} b{r['batch_size']}"): r for r in rows}
    z = [[cell[(m, c)]["speedup_vs_cpu_fp32"] if (m, c) in cell else None for c in columns] for m in models]
    text = [[f"{v:.2f}×" if v is not None else "" for v in row] for row in z]
    log_z = [[math.log2(v) if v else None for v in row] for row in z]
    fig = go.Figure(go.Heatmap(z=log_z, x=[_t(c) for c in columns], y=[_t(m) for m in models], text=text, texttemplate="%{text}", colorscale="RdBu", zmid=0,
                               colorbar={"title": "log2 speedup"},
                               hovertext=[[_hover(cell[(m, c)]) if (m, c) in cell else "not measured" for c in columns] for m in models],
                               hoverinfo="text"))
    fig.update_layout(title="Speedup vs the same host's CPU, torch fp32, same batch (inference; >1× is faster)",
                      xaxis_title="hardware · backend, precision, batch", yaxis_title="model")
    return fig


def memory_by_hardware_and_batch(data: ReportData):
    rows = [r for r in data.at_default_input() if r["precision"] == "fp32" and memory_target(r)]
    series = _series(rows, lambda r: (r["model"], hardware_label(r), r["mode"]))
    if not series:
        return None
    go = _go()
    fig = go.Figure()
    palette = _palette()
    colours = {key: palette[i % len(palette)] for i, key in enumerate(sorted({(m, hw) for m, hw, _ in series}))}
    for (model, hw, mode), sel in sorted(series.items()):
        fig.add_scatter(name=_t(f"{model} · {hw} · {mode}"), x=[r["batch_size"] for r in sel],
                        y=[memory_target(r) / MIB for r in sel], mode="lines+markers",
                        line={"dash": "dot" if mode == "training" else "solid", "color": colours[(model, hw)]},
                        marker={"color": colours[(model, hw)]}, hovertext=[_hover(r) for r in sel], hoverinfo="text")
    fig.update_layout(title="Measured peak memory by hardware and batch size (fp32; dotted = training)",
                      xaxis_title="batch size (log scale)", xaxis_type="log",
                      yaxis_title="peak memory on the device (MiB): a GPU's allocator, else process RSS",
                      legend_title="model · hardware · mode")
    return fig


def precision_impact(data: ReportData):
    """Latency of each precision relative to fp32 on the same hardware, batch and input."""
    rows = [r for r in data.at_default_input() if r["mode"] == "inference"]
    fp32 = {(r["model"], hardware_label(r), r["batch_size"]): r for r in rows if r["precision"] == "fp32"}
    others = [r for r in rows if r["precision"] != "fp32" and (r["model"], hardware_label(r), r["batch_size"]) in fp32]
    if not others:
        return None
    go = _go()
    batch = min(r["batch_size"] for r in others)
    fig = go.Figure()
    for p in ("fp16", "bf16", "int8"):
        sel = sorted((r for r in others if r["precision"] == p and r["batch_size"] == batch), key=lambda r: (r["model"], hardware_label(r)))
        if not sel:
            continue
        ratios = [r["p50_ms"] / fp32[(r["model"], hardware_label(r), r["batch_size"])]["p50_ms"] for r in sel]
        fig.add_bar(name=p, x=[_t(f"{r['model']} · {hardware_label(r)}") for r in sel], y=ratios,
                    text=[f"{x:.2f}×" for x in ratios], hovertext=[_hover(r) for r in sel], hoverinfo="text")
    fig.add_hline(y=1.0, line_dash="dash", annotation_text="fp32")
    fig.update_layout(title=f"Precision impact: latency relative to fp32 (inference, batch {batch}; below 1 is faster)",
                      xaxis_title="model · hardware", yaxis_title="latency / fp32 latency", barmode="group",
                      legend_title="precision")
    return fig


def training_vs_inference(data: ReportData):
    pairs = training_inference_pairs(data.at_default_input())
    if not pairs:
        return None
    go = _go()
    labels = [_t(f"{p['model']} · {p['hardware']} · b{p['batch_size']}") for p in pairs]
    fig = go.Figure()
    fig.add_bar(name="inference (forward)", x=labels, y=[p["inference_p50_ms"] for p in pairs])
    fig.add_bar(name="training step (forward + backward + AdamW)", x=labels, y=[p["training_p50_ms"] for p in pairs],
                text=[f"{p['training_to_inference']:.1f}×" for p in pairs])
    fig.update_layout(title="Training step vs inference latency (fp32, same batch and input; label: ratio)",
                      xaxis_title="model · hardware · batch", yaxis_title="latency per batch (ms, p50, log scale)", yaxis_type="log",
                      barmode="group")
    return fig


def predicted_vs_measured(data: ReportData):
    """Each measured row against the prediction of the fold that held its model out."""
    rows = [r for r in data.held_out if r.get("latency_predicted")]
    if not rows:
        return None
    go = _go()
    h = data.interval_half_width.get("latency") or 0.0
    fig = go.Figure()
    for family in sorted({r["family"] for r in rows}):
        sel = [r for r in rows if r["family"] == family]
        pred = [r["latency_predicted"] for r in sel]
        fig.add_scatter(name=_t(family), mode="markers", x=[r["latency_measured"] for r in sel], y=pred,
                        error_y={"type": "data", "symmetric": False, "array": [p * (math.exp(h) - 1) for p in pred],
                                 "arrayminus": [p * (1 - math.exp(-h)) for p in pred]},
                        hovertext=[f"{_t(r['model'])} · {_t(r['device_kind'])} · {r['precision']} · {r['mode']} · batch {r['batch_size']}<br>"
                                   f"measured {r['latency_measured']:.2f} ms, predicted {r['latency_predicted']:.2f} ms "
                                   f"({100 * (r['latency_predicted'] / r['latency_measured'] - 1):+.0f}%)" for r in sel],
                        hoverinfo="text")
    lo = min(min(r["latency_measured"], r["latency_predicted"]) for r in rows) / 1.5
    hi = max(max(r["latency_measured"], r["latency_predicted"]) for r in rows) * 1.5
    fig.add_scatter(name="predicted = measured", x=[lo, hi], y=[lo, hi], mode="lines", line={"dash": "dash", "color": "grey"})
    fig.update_layout(title=f"Predicted vs measured latency, each model held out of training (predictor {data.predictor_version}; "
                            "whiskers: interval)",
                      xaxis_title="measured mean latency per batch (ms, log scale)", xaxis_type="log",
                      yaxis_title="held-out prediction (ms, log scale)", yaxis_type="log", legend_title="family")
    return fig


def roofline(data: ReportData, traffic: Callable[[str, str], tuple[float, float] | None] | None = None):
    """Achieved FLOP/s against operational intensity, under the device's probed compute peak and
    bandwidth. `traffic(model, input_dims)` gives (weight bytes, activation bytes per sample)
    of one forward pass; by default from the traced operator profile."""
    traffic = traffic or operator_traffic
    rows = [r for r in _inference_fp32(data) if r.get("hardware_fingerprint") in data.devices]
    go = _go()
    fig = go.Figure()
    points = 0
    for fp in sorted({r["hardware_fingerprint"] for r in rows}):
        device = data.devices[fp]
        sel = []
        for r in rows:
            info = data.model_inputs.get((r["model"], r["input_dims"]))
            t = traffic(r["model"], r["input_dims"]) if info and info.get("flops_per_sample") else None
            if r["hardware_fingerprint"] == fp and t:
                flops = info["flops_per_sample"] * r["batch_size"]
                sel.append((r, flops / (t[0] + t[1] * r["batch_size"]), flops / (r["p50_ms"] / 1e3) / 1e9))
        if not sel:
            continue
        points += len(sel)
        label = device.get("name") or device["kind"]
        if device["kind"] != "cpu" and device["kind"] not in label.lower():  # OpenVINO names its device "CPU"
            label = f"{device['kind']} · {label}"
        label = _t(label)
        fig.add_scatter(name=f"{label}: measured configs", mode="markers", x=[s[1] for s in sel], y=[s[2] for s in sel],
                        hovertext=[_hover(s[0]) + f"<br>{s[2]:.1f} GFLOP/s at {s[1]:.1f} FLOP/B" for s in sel], hoverinfo="text")
        peak, bandwidth = device.get("matmul_gflops_best"), device.get("memory_bandwidth_gbs_best")
        if peak and bandwidth:
            xs = [min(s[1] for s in sel) / 4, peak / bandwidth, max(s[1] for s in sel) * 4]
            fig.add_scatter(name=f"{label}: probed roof ({peak:.0f} GFLOP/s, {bandwidth:.1f} GB/s)", mode="lines",
                            x=xs, y=[min(peak, x * bandwidth) for x in xs], line={"dash": "dash"})
    if not points:
        return None
    fig.update_layout(title="Roofline: achieved compute vs operational intensity (fp32 inference, measured p50)",
                      xaxis_title="operational intensity (FLOP per byte of traced operator traffic, log scale)", xaxis_type="log",
                      yaxis_title="achieved GFLOP/s (log scale)", yaxis_type="log")
    return fig


def operator_traffic(model: str, input_dims: str) -> tuple[float, float] | None:
    """(weight bytes, activation bytes per sample) summed over the traced fp32 forward pass."""
    from models.catalog import UnknownModelError
    from models.op_profile import op_profile
    from models.resolve import resolve_model

    try:
        spec = resolve_model(model)
    except UnknownModelError:
        return None
    dims = json.loads(input_dims) if input_dims else {}
    profile = op_profile(spec, dims.get("seq_length") if "image_size" not in dims and "audio_frames" not in dims else None)
    return float(profile.weight_bytes.sum()), float(profile.activation_bytes.sum())


def _mib(value: float | None) -> float | None:
    """Bytes as MiB; a row without a memory figure stays without one (not 0 MiB)."""
    return None if value is None else value / MIB


def training_inference_pairs(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Configs measured in both modes (same model, hardware, precision, batch, input); peaks are
    what must fit on the device (memory_target: a GPU's allocator, else process RSS). A training
    step is paired with the inference of its own machine (host, accelerator), whatever the labels
    say: unlabelled, two machines' CPUs are both "cpu", and an EPYC's step was divided by a Xeon's
    inference (236.5 / 17.0 ms = 13.9x, where the EPYC's own inference, 25.6 ms, gives 9.2x)."""
    key = lambda r: (r["model"], hardware_label(r), r.get("host"), r.get("accelerator"), r["precision"],  # noqa: E731
                     r["batch_size"], r["input_dims"])
    inference = {key(r): r for r in rows if r["mode"] == "inference"}
    out = []
    for r in sorted((r for r in rows if r["mode"] == "training"), key=key):
        i = inference.get(key(r))
        if i is None:
            continue
        out.append({"model": r["model"], "hardware": hardware_label(r), "precision": r["precision"], "batch_size": r["batch_size"],
                    "input_dims": r["input_dims"], "inference_p50_ms": i["p50_ms"], "training_p50_ms": r["p50_ms"],
                    "training_to_inference": r["p50_ms"] / i["p50_ms"],
                    "inference_samples_per_s": i["throughput_samples_per_s"], "training_samples_per_s": r["throughput_samples_per_s"],
                    "inference_peak_mib": _mib(memory_target(i)), "training_peak_mib": _mib(memory_target(r))})
    return out


def _series(rows: list[dict[str, Any]], key) -> dict[Any, list[dict[str, Any]]]:
    out: dict[Any, list[dict[str, Any]]] = {}
    for r in rows:
        out.setdefault(key(r), []).append(r)
    return {k: sorted(v, key=lambda r: r["batch_size"]) for k, v in out.items()}


#: name -> (builder, one line a reader sees on the dashboard)
FIGURES: dict[str, tuple[Callable[[ReportData], Any], str]] = {
    "hardware_comparison": (hardware_comparison, "Throughput of every model on each measured hardware and backend."),
    "batch_scaling": (batch_scaling, "How throughput and latency scale with batch size."),
    "efficiency_vs_cpu": (efficiency_vs_cpu, "Speedup of each hardware/precision over the same host's CPU in fp32."),
    "memory": (memory_by_hardware_and_batch, "Peak memory by hardware and batch size, inference and training."),
    "precision_impact": (precision_impact, "Latency of fp16/bf16/int8 relative to fp32."),
    "training_vs_inference": (training_vs_inference, "Training step time against inference latency for the same config."),
    "predicted_vs_measured": (predicted_vs_measured, "The predictor's held-out predictions against measurements, with intervals."),
    "roofline": (roofline, "Achieved compute against operational intensity under the device's probed peaks."),
    "generation_latency": (generation_latency, "Generation: time to first token and time per output token per device."),
    "generation_memory": (memory_breakdown, "Generation: weights, KV cache, activations and the process against the measured peak."),
}
