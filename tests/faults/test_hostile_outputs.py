"""Text from another machine's landing file (a model name, a hostname, a device name, an error)
is data in everything devicefit publishes: never a formula in a spreadsheet, never markup in a
figure, never styling or a control sequence on a terminal."""
import csv
import io

from devicefit.reports import analysis, regression
from devicefit.reports.baselines import ConfigIdentity, SampleSet
from devicefit.reports.spreadsheet import read_spreadsheet_text, spreadsheet_text

FORMULA = '=HYPERLINK("http://evil.example","click")'
FORMULAS = [FORMULA, "+1+cmd|' /C calc'!A0", "-2+3", "@SUM(A1)", "\t=1", "\r=1", "'=1", "'plain", "''", "plain", ""]


def _row(model: str, hostname: str = "vm", device_name: str = "Xeon") -> dict:
    return {"model": model, "family": "embedding", "input_dims": "{}", "mode": "inference", "precision": "fp32", "batch_size": 1,
            "p50_ms": 2.0, "device_kind": "cpu", "backend": "torch", "host": "cpu-x", "accelerator": None,
            "device_name": device_name, "hostname": hostname, "throughput_samples_per_s": 500.0, "peak_rss_bytes": 2**29, "runs": 1}


def test_text_cells_are_inert_and_read_back_exactly():
    for text in FORMULAS:
        cell = spreadsheet_text(text)
        assert not cell.startswith(("=", "+", "-", "@", "\t", "\r")), cell
        assert read_spreadsheet_text(cell) == text


def test_the_comparative_analysis_holds_no_formula():
    """A landing file's model named `=HYPERLINK(...)` went into comparative_analysis.csv as a
    cell a spreadsheet evaluates (csv quoting does not stop it)."""
    text = analysis.analysis_csv([_row(FORMULA), _row("@SUM(A1)")])
    rows = list(csv.DictReader(io.StringIO(text)))
    assert {r["model"] for r in rows} == {"'" + FORMULA, "'@SUM(A1)"}
    cells = [c for r in rows for c in r.values()]
    assert not any(c.startswith(("=", "+", "@")) for c in cells), cells


def test_a_hostile_name_round_trips_through_both_csv_baselines(tmp_path):
    identity = ConfigIdentity(FORMULA, "cpu", "torch", "fp32", "inference", 1, "{}")
    sets = [SampleSet(identity, [2.0, 2.1], 2.05, "-run", "@cpu-x")]
    exported = regression.write_baseline_csv(sets, tmp_path / "baseline.csv")
    cells = [c for r in csv.reader(open(exported)) for c in r]
    assert not any(c.startswith(("=", "+", "-", "@")) for c in cells), cells
    [back] = regression.sets_from_csv(exported)
    assert (back.identity, back.run_id, back.hardware_fingerprint) == (identity, "-run", "@cpu-x")
    wide = tmp_path / "analysis.csv"
    wide.write_text(analysis.analysis_csv([_row(FORMULA)]))
    [from_wide] = regression.sets_from_csv(wide)
    assert from_wide.identity.model == FORMULA


TERMINAL_NAMES = ["bad[/]name", "[link=http://evil.example]bert[/link]", "clear\x1b[2J\x1b]0;title\x07", ":warning: [bold red]x",
                  "bert\u202ebase-int8\u202c", "gpt\u2066-safe\u2069"]  # right-to-left override and isolate: shown reordered


def _store_with(tmp_path, names: list[str], hostname: str = "vm"):
    from devicefit import store
    from devicefit.paths import DataPaths
    from devicefit.pipeline import refresh_aggregates
    from tests.pipelines.test_store import _doc, _row

    paths = DataPaths(tmp_path)
    con = store.connect(paths.database)
    store.migrate(con)
    store.replace_source(con, "hostile", "ingest", _doc([{**_row(hostname=hostname), "model": n, "config_key": f"k{i}"}
                                                        for i, n in enumerate(names)]))
    con.close()
    refresh_aggregates(paths)
    return paths


def test_cli_tables_print_stored_names_as_text(tmp_path):
    """Model names from another machine's landing file in `devicefit recommendations`: `a[/]b`
    raised rich's MarkupError (a traceback), `[link=...]` became a terminal hyperlink, `[bold red]`
    styled the cell and an ESC sequence reached the terminal (clearing it, retitling the window)."""
    from typer.testing import CliRunner

    from devicefit.cli import app

    paths = _store_with(tmp_path, TERMINAL_NAMES)
    out = CliRunner().invoke(app, ["recommendations", "--benchmark-dir", str(paths.root)], terminal_width=300)
    assert out.exit_code == 0, out.output
    assert "\x1b" not in out.output and "\x07" not in out.output
    for shown in ("bad[/]name", "[link=http://evil.example]bert[/link]", "clear\\x1b[2J\\x1b]0;title\\x07", ":warning: [bold red]x",
                  "bert\\u202ebase-int8\\u202c", "gpt\\u2066-safe\\u2069"):
        assert shown in out.output, out.output
    assert not set(out.output) & {"\u202e", "\u202c", "\u2066", "\u2069"}
    out = CliRunner().invoke(app, ["recommendations", "--model", "a[/]b\x1b[2J", "--benchmark-dir", str(paths.root)])
    assert out.exit_code != 0 and "no measurements of" in out.output and "\x1b" not in out.output, out.output


def test_a_backend_error_in_the_results_table_is_text(capsys):
    from benchmark_runners.records import BenchmarkConfig, BenchmarkResult
    from devicefit.cli.common import console
    from devicefit.cli.measure import _results_table

    failed = BenchmarkResult.for_config(BenchmarkConfig("bert-tiny", device="cpu"), "r1", "2026-11-22T00:00:00+00:00", "failed",
                                        "OSError: cannot open [/tmp/w/model.bin] \x1b[8m(hidden)")
    console.print(_results_table([failed]))
    shown = capsys.readouterr().out
    assert "[/tmp/w/model.bin]" in shown and "\\x1b[8m(hidden)" in shown and "\x1b" not in shown


LINK = '<a href="https://evil.example/">bert</a><span style="font-size:90px">big</span>\u202egnp.exe\u2066'  # and a right-to-left override


def _strings(value) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, (list, tuple)):
        return [s for v in value for s in _strings(v)]
    return []


def test_figures_show_names_as_text_not_plotly_markup():
    """Plotly renders <a href>, <span style>, <b> and <br> in trace names, axis categories and
    hover text: a model, device or host named with them became a link (or a restyled label) on
    the report's figures. Every figure with data shows the names escaped, which plotly displays
    as the characters."""
    from devicefit.reports.data import ReportData, labelled
    from devicefit.reports.figures import FIGURES

    rows = []
    for mode in ("inference", "training"):
        for precision, p50 in (("fp32", 4.0), ("bf16", 2.0)):
            for batch in (1, 2):
                rows.append({**_row(LINK, hostname=LINK, device_name=LINK), "mode": mode, "precision": precision, "batch_size": batch,
                             "p50_ms": p50 * batch, "speedup_vs_cpu_fp32": 2.0 if precision == "bf16" else 1.0, "family": LINK})
    rows.append({**_row(LINK, hostname=LINK, device_name=LINK), "mode": "generation", "tpot_p50_ms": 1.0, "ttft_ms": 5.0,
                 "breakdown_measured_peak_bytes": 2**30, "breakdown_weights_bytes": 2**29})
    data = ReportData(labelled(rows))
    drawn = 0
    for name, (builder, _) in FIGURES.items():
        fig = builder(data)
        if fig is None:
            continue
        drawn += 1
        shown = _strings(fig.to_dict()["data"])
        assert not any("<a " in s or "<span" in s for s in shown), (name, [s for s in shown if "<a " in s][:2])
        assert any("&lt;a href" in s for s in shown), name
        assert not any(set(s) & {"\u202e", "\u2066"} for s in shown) and any("\\u202e" in s for s in shown), name
    assert drawn == 8  # all but the roofline (no probed device) and predicted vs measured (no predictor)


def test_a_name_in_the_dagster_markdown_metadata_is_text_not_a_link():
    """The measurements asset's `results` metadata is a markdown table the Dagster UI renders; a
    model, device or backend error like `[x](https://...)`, `**x**` or `<b>x</b>` was rendered as
    a link, emphasis or HTML, and a `|` split the cell (it was replaced by `/`)."""
    from markdown_it import MarkdownIt

    from devicefit.pipeline import markdown_table

    hostile = "[click](https://evil.example) **bold** <b>tag</b> a|b `code` under_score"
    html = MarkdownIt("commonmark").enable("table").render(markdown_table([{"model": hostile, "p50 ms": 1.5}], ["model", "p50 ms"]))
    cells = html.split("<tbody>")[1]
    assert "<a " not in cells and "<strong>" not in cells and "<b>" not in cells and "<code>" not in cells and "<em>" not in cells
    assert "[click](https://evil.example) **bold** &lt;b&gt;tag&lt;/b&gt; a|b `code` under_score" in cells
    assert cells.count("<td>") == 2
