"""The guides' scripts as devicefit subcommands: one table, and `devicefit guide SCRIPT ARGS...`.

The requirement guides (shared/spec 000-004) show their commands as scripts of an older layout
(`python hardware_model_predictor.py --model bert --hardware cuda cpu`). Each script is one or
more devicefit subcommands; SCRIPTS below says which, per script, in order: the first rule whose
`when` flag the command line holds applies (a rule without `when` is the script's default). A
rule names the subcommand (with fixed arguments), the guide flags it drops because choosing the
rule is all they say (`--cli --action predict`), the guide flags it renames, and a guide flag
whose values become the subcommand's positional arguments. Every other flag is passed through:
the subcommands accept the guides' spellings themselves (`--model-name`, `--batch-size`,
`--training`, `--hardware cuda cpu`, ...).

    devicefit guide hardware_model_predictor.py --model bert-base-uncased --hardware cuda cpu

runs `devicefit predict --model bert-base-uncased --hardware cuda cpu`. tests/test_guide_examples.py
runs every CLI example of the guides through this table."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import PurePosixPath

import typer

from devicefit.errors import DevicefitError


class UnknownGuideCommand(DevicefitError, ValueError):
    """A script or action the guides do not use."""

    exit_code = 2


@dataclass(frozen=True)
class Rule:
    command: tuple[str, ...]  # the devicefit subcommand and any fixed arguments
    when: str | None = None  # the guide flag that selects this rule; None: the script's default
    drop: tuple[str, ...] = ()  # guide flags without a value, dropped (they only chose the rule)
    drop_valued: tuple[str, ...] = ()  # guide flags with one value, dropped likewise
    rename: dict[str, str] = field(default_factory=dict)  # guide flag -> devicefit flag
    positional: str | None = None  # guide flag whose values become positional arguments
    note: str = ""


SCRIPTS: dict[str, tuple[Rule, ...]] = {
    # 001 predictor guide
    "hardware_model_predictor.py": (Rule(("predict",)),),
    # 002 selection guide
    "hardware_selector.py": (
        Rule(("map",), when="--create-map", drop=("--create-map",)),
        Rule(("select",), when="--model-name"),
        Rule(("select",), when="--model"),
        Rule(("map",), note="no model given: the selection map under the given config (the selector's default action)"),
    ),
    # 000 API guide: `--cli --action X` runs the command X; without --cli the script serves the API.
    "hardware_selection_api.py": (
        *(Rule((action,), when=f"--action={action}", drop=("--cli",), drop_valued=("--action",))
          for action in ("select", "predict", "analyze", "distributed", "map", "detect")),
        Rule(("serve",)),
    ),
    "enhanced_hardware_benchmark_runner.py": (
        Rule(("run",), when="--multiple-models", drop=("--multiple-models", "--create-report"),
             rename={"--model-families": "--category"},
             note="the pipeline's run measures every model of the families and writes the reports (--create-report is what it does)"),
        Rule(("distributed",), when="--distributed", drop=("--distributed",),
             note="a distributed training plan from memory arithmetic: there are no GPUs to benchmark on here"),
        Rule(("benchmark",)),
    ),
    "hardware_model_integration.py": (
        Rule(("resources",), when="--resource-config", positional="--resource-config"),
        Rule(("recommend",), when="--task"),
        Rule(("classify", "--hardware-aware"), when="--model", positional="--model"),
    ),
    # 004 benchmarking guide
    "test/create_hardware_model_benchmark_database.py": (
        Rule(("db", "init"), when="--init-db", drop=("--init-db",)),
        Rule(("db", "status"), when="--status", drop=("--status",)),
        Rule(("compare",), when="--compare-to", drop=("--analyze",), rename={"--compare-to": "--baseline"},
             note="the regression check of the stored runs against a baseline file"),
        Rule(("analyze",), when="--analyze", drop=("--analyze",)),
        Rule(("recommendations",), when="--recommendations", drop=("--recommendations",)),
        Rule(("report",), when="--visualize", drop=("--visualize",)),
        Rule(("compare-training-inference",), when="--compare-training-inference", drop=("--compare-training-inference",)),
        Rule(("memory-search",), when="--memory-constrained"),
        Rule(("benchmark",), when="--output-ci", note="a CI check of named configs: the benchmark command writes the CI report"),
        Rule(("run",)),
    ),
    "test/model_benchmark_runner.py": (Rule(("benchmark",)),),
    "test_generator_with_resource_pool.py": (Rule(("generate-tests",)),),
}


def _script_key(script: str) -> str:
    path = PurePosixPath(script.replace("\\", "/"))
    for key in SCRIPTS:
        if str(path) == key or str(path).endswith("/" + key) or (path.name == key and "/" not in key):
            return key
    name = path.name
    matches = [key for key in SCRIPTS if PurePosixPath(key).name == name]
    if len(matches) == 1:
        return matches[0]
    raise UnknownGuideCommand(f"{script!r} is not a script of the guides; known: {', '.join(SCRIPTS)}")


def _holds(args: list[str], when: str) -> bool:
    if "=" in when:
        flag, value = when.split("=", 1)
        return any(a == flag and i + 1 < len(args) and args[i + 1] == value for i, a in enumerate(args)) or f"{flag}={value}" in args
    return any(a == when or a.startswith(when + "=") for a in args)


def rule_for(script: str, args: list[str]) -> Rule:
    key = _script_key(script)
    for rule in SCRIPTS[key]:
        if rule.when is None or _holds(args, rule.when):
            return rule
    raise UnknownGuideCommand(f"{key} {' '.join(args)}: no devicefit command matches these flags "
                              f"({', '.join(r.when for r in SCRIPTS[key] if r.when)})")


def translate(script: str, args: list[str]) -> list[str]:
    """The devicefit argument list (without the program name) for a guide command line."""
    rule = rule_for(script, args)
    out: list[str] = list(rule.command)
    positional: list[str] = []
    i = 0
    while i < len(args):
        token = args[i]
        flag = token.split("=", 1)[0]
        if flag in rule.drop:
            i += 1
            continue
        if flag in rule.drop_valued:
            i += 1 if "=" in token else 2
            continue
        if rule.positional and flag == rule.positional:
            if "=" in token:
                positional.append(token.split("=", 1)[1])
            i += 1
            while i < len(args) and not args[i].startswith("-"):
                positional.append(args[i])
                i += 1
            continue
        out.append(rule.rename.get(flag, flag) + (token[len(flag):] if "=" in token else ""))
        i += 1
    return out + positional


def register(app) -> None:
    """Adds `devicefit guide` to the command group."""
    @app.command("guide", rich_help_panel="Guides", context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
                 help="Run a command of the guides as written, minus `python`: `devicefit guide hardware_model_predictor.py --model "
                      "bert --hardware cuda cpu`. Prints the devicefit command it runs (devicefit/cli/guides.py holds the table). "
                      "`devicefit guide --modules-path` prints the directory that makes the guides' Python imports work as written "
                      "(`PYTHONPATH=\"$(devicefit guide --modules-path)\" python example.py`).")
    def guide(ctx: typer.Context,
              script: str = typer.Argument(None, help="The guide's script, e.g. hardware_selector.py."),
              modules_path: bool = typer.Option(False, "--modules-path", help="Print the directory of the guides' module names "
                                                "(hardware_selector, resource_pool, ...) for PYTHONPATH, and exit.")) -> None:
        from devicefit.cli.common import err

        if modules_path:
            from devicefit.guide_modules import modules_path as path

            typer.echo(str(path()))
            raise typer.Exit(0)
        if script is None:
            raise UnknownGuideCommand(f"name the guide's script (one of {', '.join(sorted(SCRIPTS))}), or pass --modules-path")
        argv = translate(script, list(ctx.args))
        err.print(f"devicefit {' '.join(argv)}", soft_wrap=True, highlight=False, markup=False)
        code = ctx.find_root().command.main(args=argv, prog_name="devicefit", standalone_mode=False)
        raise typer.Exit(code or 0)
