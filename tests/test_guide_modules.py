"""The guides' Python imports as written (`from hardware_selector import HardwareSelector`),
through devicefit/guide_modules: every import line of every ```python block of the guides that
names a guide module resolves, in a fresh interpreter with only `devicefit guide --modules-path`
added to PYTHONPATH, to the very objects of the devicefit modules the table names."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from devicefit.guide_modules import MODULES, modules_path

ROOT = Path(__file__).resolve().parents[1]
SPEC = Path(os.environ.get("DEVICEFIT_SPEC_DIR") or ROOT.parent / "shared" / "spec")
# Kept here so a checkout without the guides beside it (CI's fresh clone) checks them too.
IMPORTS_FILE = ROOT / "tests" / "guide_python_imports.json"
# The guide modules of an older layout: module names no standard or third-party package uses.
FROM_IMPORT = re.compile(r"^\s*from\s+([A-Za-z_]\w*)\s+import\s+(.+?)\s*$")


def guide_imports() -> list[list]:
    """[guide, line, module, [names]] for each `from M import ...` of a ```python block whose M is
    not an installed package (the guides' own modules)."""
    out = []
    for guide in sorted(SPEC.glob("0*.md")):
        in_python = False
        for n, line in enumerate(guide.read_text().splitlines(), start=1):
            stripped = line.strip()
            if stripped.startswith("```"):
                in_python = stripped == "```python" and not in_python
                continue
            match = FROM_IMPORT.match(line) if in_python else None
            if match and match.group(1) not in {"transformers", "torch", "typing", "pathlib", "dataclasses"}:
                names = [name.strip().split(" as ")[0] for name in match.group(2).strip("()").split(",")]
                out.append([guide.name, n, match.group(1), names])
    return out


IMPORTS = json.loads(IMPORTS_FILE.read_text())


def test_the_kept_imports_are_the_guides_own():
    if not SPEC.is_dir():
        pytest.skip(f"the guides are not beside this checkout ({SPEC}; set DEVICEFIT_SPEC_DIR): the kept list is used as it is")
    assert guide_imports() == IMPORTS, f"the guides changed: regenerate {IMPORTS_FILE.name} from guide_imports()"


def test_every_guide_module_is_in_the_table_and_every_table_entry_is_used():
    assert len(IMPORTS) >= 15
    assert {module for _, _, module, _ in IMPORTS} == set(MODULES)


def test_the_guides_imports_run_as_written_with_the_modules_path_and_give_devicefits_own_objects():
    lines = sorted({f"from {module} import {', '.join(names)}" for _, _, module, names in IMPORTS})
    checks = [f"assert {name} is importlib.import_module({MODULES[module]!r}).{name}, {name!r}"
              for _, _, module, names in IMPORTS for name in names]
    program = "\n".join(["import importlib", *lines, *sorted(set(checks)), "print('ok', len(sys.modules) > 0)"])
    env = {**os.environ, "PYTHONPATH": str(modules_path())}
    result = subprocess.run([sys.executable, "-c", "import sys\n" + program], cwd=ROOT.parent, env=env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip() == "ok True"


def test_without_the_modules_path_the_guide_names_are_not_installed_top_level():
    """They would shadow any other package's `resource_pool` or `hardware_detection`."""
    result = subprocess.run([sys.executable, "-c", "import hardware_selector"], cwd=ROOT.parent,
                            env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"}, capture_output=True, text=True, timeout=120)
    assert result.returncode != 0 and "No module named 'hardware_selector'" in result.stderr


def test_the_cli_prints_the_modules_path():
    from typer.testing import CliRunner

    from pipelines.cli import app

    result = CliRunner().invoke(app, ["guide", "--modules-path"])
    assert result.exit_code == 0 and Path(result.output.strip()) == modules_path()
    result = CliRunner().invoke(app, ["guide"])
    assert result.exit_code == 2 and "--modules-path" in result.output
