"""Writing the report: one interactive HTML file per figure (plotly.js written once beside them,
so the pages open without a network), a PNG of each where a Chromium binary lets kaleido render
one, and an index.html that links them all and says why any figure is missing."""
from __future__ import annotations

import html
import os
import shutil
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from devicefit.reports.data import ReportData
from devicefit.reports.figures import FIGURES
from devicefit.shown_text import visible

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "chrome")


@dataclass
class ReportOutput:
    directory: Path
    index: Path
    html: dict[str, Path] = field(default_factory=dict)
    png: dict[str, Path] = field(default_factory=dict)
    missing: dict[str, str] = field(default_factory=dict)  # figure -> why it is not there
    png_unavailable: str | None = None
    note: str | None = None  # the data's (ReportData.note): the figures are not of the store's aggregates table


def chromium_binary() -> str | None:
    return next((path for name in CHROMIUM_NAMES if (path := shutil.which(name))), None)


def png_unavailable_reason() -> str | None:
    """Why PNGs cannot be rendered here, or None when they can."""
    try:
        import kaleido  # noqa: F401
    except ImportError:
        return "kaleido is not installed (pip install kaleido)"
    if chromium_binary() is None:
        return "no Chromium binary on PATH (apt-get install chromium)"
    return None


def write_report(data: ReportData, directory: Path, png: bool = True, extras: dict[str, Path] | None = None) -> ReportOutput:
    """`extras`: other outputs (label -> file) the index links to, such as the analysis CSV.

    Every file is written through a temporary file and a rename (results_io.write_text_atomic):
    written in place, an interrupted run (a full disk, a kill) left a cut page where the last
    report was, and plotly's own copy of plotly.min.js, made only where none is there, stayed cut
    for every later report. A figure's HTML or PNG this report does not produce is removed (its
    own `<figure>.html` / `<figure>.png` names only), so a figure no longer drawn is not left
    beside the index looking current."""
    from plotly.offline import get_plotlyjs

    from devicefit.results_io import write_text_atomic

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    out = ReportOutput(directory, directory / "index.html", note=data.note)
    out.png_unavailable = png_unavailable_reason() if png else "not requested"
    drawn: dict[str, Any] = {}
    for name, (builder, _) in FIGURES.items():
        try:
            fig = builder(data)
        except Exception as exc:  # noqa: BLE001 - one broken figure must not hide the others; it is named on the index
            out.missing[name] = f"could not be drawn: {type(exc).__name__}: {exc}"
            continue
        if fig is None:
            out.missing[name] = data.unavailable.get(name) or "the measurements hold nothing this figure can show yet"
            continue
        drawn[name] = fig
    if drawn:
        write_text_atomic(directory / "plotly.min.js", get_plotlyjs())  # the bundle the pages load beside them
    for name, fig in drawn.items():
        path = directory / f"{name}.html"
        write_text_atomic(path, fig.to_html(include_plotlyjs="directory", full_html=True))
        out.html[name] = path
    if out.png_unavailable is None and drawn:
        _write_pngs(drawn, directory, out)
    _remove_stale_figures(directory, out)
    links = {label: os.path.relpath(path, directory) for label, path in (extras or {}).items() if Path(path).exists()}
    write_text_atomic(out.index, _index_html(data, out, links))
    return out


def _remove_stale_figures(directory: Path, out: ReportOutput) -> None:
    """Remove the `<figure>.html` and `<figure>.png` files of FIGURES that this report did not
    write (a figure no longer drawn, PNGs not rendered this time): they are an earlier report's.
    Any other file in the directory is left alone."""
    for name in FIGURES:
        for suffix, written in ((".html", out.html), (".png", out.png)):
            path = directory / f"{name}{suffix}"
            if name not in written and path.is_file():
                path.unlink()


def _write_pngs(figures: dict[str, Any], directory: Path, out: ReportOutput) -> None:
    """Every figure's PNG in one kaleido call: it starts Chromium once for the batch, where a
    call per figure started it per figure (2.5 s each, 26 s of a results run on 2 cores)."""
    import plotly.io as pio

    paths = {name: directory / f"{name}.png" for name in figures}
    # rendered under temporary names and renamed into place: a cut PNG never takes a figure's name
    parts = {name: directory / f".{name}.part.png" for name in figures}
    try:
        pio.write_images(list(figures.values()), list(parts.values()), width=1400, height=800, scale=1)
        for name, part in parts.items():
            os.replace(part, paths[name])
            out.png[name] = paths[name]
    except Exception as exc:  # noqa: BLE001 - the HTML is the report; a PNG failure is reported, not fatal
        out.png_unavailable = f"PNG export failed: {type(exc).__name__}: {exc}"
    finally:
        for part in parts.values():
            part.unlink(missing_ok=True)


def _index_html(data: ReportData, out: ReportOutput, links: dict[str, str]) -> str:
    hosts = sorted({str(r.get("hostname")) for r in data.aggregates})
    items = []
    for name, (_, description) in FIGURES.items():
        title = name.replace("_", " ")
        if name in out.html:
            png = f' · <a href="{name}.png">PNG</a>' if name in out.png else ""
            items.append(f'<li><a href="{name}.html">{html.escape(title)}</a>{png} — {html.escape(description)}</li>')
        else:
            items.append(f"<li>{html.escape(title)} — <em>not drawn: {html.escape(out.missing.get(name, ''))}</em></li>")
    png_note = "" if out.png_unavailable is None else f"<p>PNG images were not rendered: {html.escape(out.png_unavailable)}.</p>"
    extras = "" if not links else "<p>Also: " + ", ".join(
        f'<a href="{html.escape(href)}">{html.escape(label)}</a>' for label, href in links.items()) + ".</p>"
    generated = datetime.now(timezone.utc).isoformat(timespec="seconds")
    note = f"<p><strong>Note:</strong> {html.escape(data.note)}.</p>" if data.note else ""
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>devicefit report</title>
<style>body{{font-family:system-ui,sans-serif;max-width:60rem;margin:2rem auto;line-height:1.5}}li{{margin:.4rem 0}}</style>
</head><body>
<h1>devicefit report</h1>
<p>{len(data.aggregates)} measured configurations of {len({r['model'] for r in data.aggregates})} models on
{html.escape(visible(', '.join(hosts)))}; predictor {html.escape(str(data.predictor_version))}. Generated {generated}.
Every figure is measured unless its title says predicted; hover a point for its runs, confidence interval and host.</p>
{note}
<ul>
{chr(10).join(items)}
</ul>
{png_note}
{extras}
</body></html>
"""
