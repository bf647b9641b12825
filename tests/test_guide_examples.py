"""Every command-line example of the guides (shared/spec 000-004), as written.

Each `python <script> ...` line of a ```bash block is mapped to its devicefit subcommand by the
one table in devicefit/cli/guides.py (the flags pass through: the subcommands take the guides'
spellings). Commands that answer from what is stored or predicted run for real on a copy of the
session's measured data directory and must exit 0; commands that measure, serve or generate
(`run`, `benchmark`, `serve`, `generate-tests`, `report`) take minutes or a GPU, so their whole
command line is parsed and validated by click, as it would be before they start, without running.
The examples of the guides' Python API and client are tests/test_guide_python_api.py's."""
from __future__ import annotations

import json
import re
import shlex
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from devicefit.cli.guides import SCRIPTS, translate
from devicefit.cli.spellings import join_list_values
from pipelines.cli import app  # the console script: devicefit.cli plus `run` and `worker`

ROOT = Path(__file__).resolve().parents[1]
SPEC = Path(__import__("os").environ.get("DEVICEFIT_SPEC_DIR") or ROOT.parent / "shared" / "spec")
# The examples, extracted from the guides (guide_commands below) and kept here, so that a checkout
# without the guides beside it (CI's fresh clone) runs them too; where the guides are present, a
# test checks the list is still theirs.
COMMANDS_FILE = ROOT / "tests" / "guide_commands.json"
PARSE_ONLY = {"run", "benchmark", "serve", "generate-tests", "report"}
# Examples whose answer depends on what was measured before: the session's data has inference
# rows only, so the training comparison says what to measure first, clearly, with exit 2.
NEEDS_EARLIER_MEASUREMENTS = {("004_benchmarking_guide.md", 210): "no config was measured in both modes for 'bert-base-uncased'"}


def guide_commands() -> list[tuple[str, int, str]]:
    """(guide, line, command) for every `python <script>` line in a ```bash block."""
    out = []
    for guide in sorted(SPEC.glob("0*.md")):
        in_bash, pending, start = False, "", 0
        for n, line in enumerate(guide.read_text().splitlines(), start=1):
            stripped = line.strip()
            if stripped.startswith("```"):
                in_bash = stripped in ("```bash", "```sh", "```shell") and not in_bash
                continue
            if not in_bash:
                continue
            if pending:
                pending += " " + stripped.rstrip("\\").strip()
                if not stripped.endswith("\\"):
                    out.append((guide.name, start, pending))
                    pending = ""
                continue
            if stripped.startswith("python ") and not stripped.startswith("python -m pip"):
                start = n
                if stripped.endswith("\\"):
                    pending = stripped.rstrip("\\").strip()
                else:
                    out.append((guide.name, n, stripped))
    return out


COMMANDS = [tuple(c) for c in json.loads(COMMANDS_FILE.read_text())]


def test_the_kept_examples_are_the_guides_own():
    if not SPEC.is_dir():
        pytest.skip(f"the guides are not beside this checkout ({SPEC}; set DEVICEFIT_SPEC_DIR): the kept list is used as it is")
    assert [list(c) for c in guide_commands()] == [list(c) for c in COMMANDS], \
        f"the guides changed: regenerate {COMMANDS_FILE.name} from guide_commands()"


def test_every_script_of_the_examples_is_in_the_table():
    assert len(COMMANDS) >= 50
    scripts = {shlex.split(c)[1] for _, _, c in COMMANDS}
    assert scripts <= set(SCRIPTS), scripts - set(SCRIPTS)


@pytest.fixture(scope="module")
def guide_data(measured, artifact, tmp_path_factory):
    """A copy of the session's measured data directory (the examples write to it) and a working
    directory holding the files the examples name (my_config.json)."""
    root = tmp_path_factory.mktemp("guide-data")
    shutil.copytree(measured.root, root / "data")
    work = root / "work"
    work.mkdir()
    shipped = ROOT / "devicefit" / "select" / "default_selection_config.json"
    (work / "my_config.json").write_text(shipped.read_text())
    # baseline.csv (004's regression example): a comparative analysis of the same data, as
    # `analyze --output baseline.csv` writes it.
    from devicefit.cli.common import aggregates
    from devicefit.paths import DataPaths
    from devicefit.reports.analysis import write_analysis_csv

    write_analysis_csv(aggregates(DataPaths(root / "data")), work / "baseline.csv")
    return root / "data", work


@pytest.mark.parametrize("guide,line,command", COMMANDS, ids=[f"{g[:3]}-L{n}" for g, n, _ in COMMANDS])
def test_a_guide_example_runs_as_written(guide, line, command, guide_data, monkeypatch):
    data, work = guide_data
    monkeypatch.setenv("DEVICEFIT_DATA_DIR", str(data))
    monkeypatch.chdir(work)
    tokens = shlex.split(command)
    argv = translate(tokens[1], tokens[2:])
    if argv[0] in PARSE_ONLY:
        import typer.main

        group = typer.main.get_command(app)
        args = join_list_values(argv)
        ctx = group.make_context("devicefit", list(args), resilient_parsing=False)
        sub = group.get_command(ctx, args[0])
        assert sub is not None, f"{guide}:{line}: no subcommand {args[0]}"
        sub.make_context(args[0], list(args[1:]), parent=ctx)  # raises on an unknown flag or a bad value
        return
    result = CliRunner().invoke(app, argv)
    expected = NEEDS_EARLIER_MEASUREMENTS.get((guide, line))
    if expected:
        assert result.exit_code == 2 and expected in " ".join(result.output.split()), result.output
        return
    assert result.exit_code == 0, f"{guide}:{line}: `{command}` -> `devicefit {' '.join(argv)}` exit {result.exit_code}:\n{result.output[-2000:]}"


def test_the_guides_flag_spellings_reach_the_same_answer(guide_data, monkeypatch):
    """Aliases are aliases: the guide's spelling and devicefit's give the same selection."""
    data, work = guide_data
    monkeypatch.setenv("DEVICEFIT_DATA_DIR", str(data))
    runner = CliRunner()
    guide = runner.invoke(app, ["select", "--model-family", "embedding", "--model-name", "bert-base-uncased", "--batch-size", "8",
                                "--hardware", "cpu", "cuda", "--json"])
    canonical = runner.invoke(app, ["select", "--family", "embedding", "--model", "bert-base-uncased", "--batch-size", "8",
                                    "--hardware", "cpu,cuda", "--json"])
    assert guide.exit_code == canonical.exit_code == 0, guide.output + canonical.output
    a, b = json.loads(guide.stdout), json.loads(canonical.stdout)
    assert (a["primary_recommendation"], a["fallback_options"]) == (b["primary_recommendation"], b["fallback_options"])
    # The distributed plan's switch under the API guide's name.
    out = runner.invoke(app, ["distributed", "--model", "gpt2", "--batch-size", "16", "--json"])
    plan = json.loads(out.stdout)
    assert plan["gpu_count"] == 1 and plan["gradient_checkpointing"] == plan["activation_checkpointing"]


def test_the_translation_table_is_what_the_readme_says():
    readme = (ROOT / "README.md").read_text()
    for script in SCRIPTS:
        assert re.search(re.escape(script), readme), f"README does not list {script}"


def test_a_script_the_guides_do_not_use_is_refused_and_arguments_are_never_a_shell(tmp_path, monkeypatch):
    """`devicefit guide` translates argument lists, token by token: nothing reaches a shell, and
    an unknown script or a flag set no rule takes is refused by name."""
    from devicefit.cli.guides import UnknownGuideCommand

    monkeypatch.chdir(tmp_path)
    out = CliRunner().invoke(app, ["guide", "rm -rf /.py", "--model", "bert"])
    assert out.exit_code == 2 and "is not a script of the guides" in out.output
    with pytest.raises(UnknownGuideCommand, match="no devicefit command matches"):
        translate("hardware_model_integration.py", ["--hw", "cuda"])  # neither --model, --task nor --resource-config
    argv = translate("hardware_model_predictor.py", ["--model", "bert; touch PWNED", "--hardware", "cpu"])
    assert argv == ["predict", "--model", "bert; touch PWNED", "--hardware", "cpu"]  # one token, a model name
    out = CliRunner().invoke(app, ["guide", "hardware_model_predictor.py", "--model", "bert; touch PWNED"])
    assert out.exit_code != 0 and "Unknown model" in out.output and not (tmp_path / "PWNED").exists()
