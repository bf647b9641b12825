"""Issue 21 item 1: a model name is data, never code. A local model directory whose name closes
the generated file's docstring and adds a statement must come out as an inert string literal,
in a file whose name holds no quotes or newlines; running the generated tests executes nothing
the user did not write."""
import ast
import shutil
import subprocess
import sys

import pytest

from devicefit.testgen import generate_test
from devicefit.testgen.literals import UnsafeLiteral, python_docstring, python_literal, safe_file_stem

PAYLOAD = 'evil"""\nimport os; os.system("touch PWNED")\n"""'
HOSTILE_TEXTS = [PAYLOAD, "'''\nraise SystemExit(3)\n'''", "\\", "\x00\x1b[2J", "é\u2028\ud800", "{{ 7*7 }}", "{% raw %}"]


@pytest.mark.parametrize("text", HOSTILE_TEXTS)
def test_literals_round_trip_and_stay_one_expression(text):
    assert ast.literal_eval(python_literal(text)) == text
    assert ast.literal_eval(python_literal([text, 1, 2.5, None, True])) == [text, 1, 2.5, None, True]
    tree = ast.parse(python_docstring(f"a\n{text}\nb\n") + "\nx = 1\n")
    assert ast.get_docstring(tree, clean=False) == f"a\n{text}\nb\n"
    assert [type(node).__name__ for node in tree.body] == ["Expr", "Assign"]


def test_values_without_a_literal_are_refused():
    with pytest.raises(UnsafeLiteral):
        python_literal(float("nan"))
    with pytest.raises(UnsafeLiteral):
        python_literal(object())


def test_file_stems_are_plain():
    assert safe_file_stem(PAYLOAD) == "evil_import_os_os_system_touch_PWNED"
    assert safe_file_stem('""" \n') == "model" and len(safe_file_stem("x" * 1000)) <= 120


def test_a_hostile_model_directory_generates_an_inert_test(tmp_path, tiny_models):
    model_dir = tmp_path / PAYLOAD
    shutil.copytree(tiny_models["text"], model_dir)
    out = tmp_path / "generated"
    result = generate_test(str(model_dir), out, device="cpu", benchmark_dir=tmp_path / "no-data")
    assert result.path.parent == out and all(c.isalnum() or c in "_." for c in result.path.name)
    source = result.path.read_text()
    tree = ast.parse(source)
    assert PAYLOAD in ast.get_docstring(tree, clean=False)
    # Only the template's own statements: imports, assignments, defs; no stray expression or call.
    for node in tree.body[1:]:
        assert isinstance(node, (ast.Import, ast.ImportFrom, ast.Assign, ast.FunctionDef)), ast.dump(node)[:200]
    model_constant = next(n for n in tree.body if isinstance(n, ast.Assign) and n.targets[0].id == "MODEL")
    assert ast.literal_eval(model_constant.value) == str(model_dir.resolve())

    run = subprocess.run([sys.executable, "-m", "pytest", str(result.path), "-q", "-p", "no:cacheprovider"],
                         capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert not (tmp_path / "PWNED").exists() and not (out / "PWNED").exists()
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]


def test_a_hostile_name_rendered_by_the_guides_plain_jinja2_code_stays_a_literal(tmp_path):
    """The integration guide renders the exported templates itself, with a plain
    jinja2.Environment (no python_literal filter): values then go through Jinja's tojson, which
    must keep a hostile name inert too."""
    import jinja2

    from devicefit.testgen.naming import export_templates

    export_templates(tmp_path / "templates")
    environment = jinja2.Environment(loader=jinja2.FileSystemLoader(tmp_path / "templates"))
    for family in ("embedding", "text_generation", "vision", "audio", "multimodal"):
        source = environment.get_template(f"hf_{family}_template.py").render(
            model_name=PAYLOAD, model_family=PAYLOAD, model_subfamily=PAYLOAD, recommended_hardware=PAYLOAD,
            resource_requirements={PAYLOAD: PAYLOAD}, torch_device=PAYLOAD)
        tree = ast.parse(source)
        assert PAYLOAD in ast.get_docstring(tree, clean=False)
        for node in tree.body[1:]:
            assert isinstance(node, (ast.Import, ast.ImportFrom, ast.Assign, ast.FunctionDef)), ast.dump(node)[:200]
        constants = {n.targets[0].id: n.value for n in tree.body if isinstance(n, ast.Assign)}
        assert ast.literal_eval(constants["MODEL"]) == PAYLOAD == ast.literal_eval(constants["RECOMMENDED"])
