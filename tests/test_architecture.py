"""The design's arrows, checked on the source: pipelines -> assets -> devicefit -> benchmark_runners
-> models, never upwards, and no import cycle between modules (imports inside functions count;
imports under `if TYPE_CHECKING:` do not, they never run)."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LAYERS = ("models", "benchmark_runners", "devicefit", "assets", "pipelines")  # lowest first


def _modules() -> dict[str, Path]:
    out = {}
    for package in LAYERS:
        for f in (ROOT / package).rglob("*.py"):
            name = ".".join(f.relative_to(ROOT).with_suffix("").parts)
            out[name.removesuffix(".__init__")] = f
    return out


def _import_graph() -> dict[str, set[str]]:
    modules = _modules()

    def owner(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text())
        type_only = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
                     for stmt in node.body for n in ast.walk(stmt)}
        deps = set()
        for node in ast.walk(tree):
            if id(node) in type_only:
                continue
            if isinstance(node, ast.Import):
                deps |= {owner(a.name) for a in node.names if a.name.split(".")[0] in LAYERS}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and node.module.split(".")[0] in LAYERS:
                deps |= {owner(f"{node.module}.{a.name}") for a in node.names}
        graph[name] = deps - {None, name}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_import_cycle():
    assert _cycles(_import_graph()) == []


def test_the_cycle_finder_finds_one():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_arrows_point_one_way():
    rank = {layer: i for i, layer in enumerate(LAYERS)}
    upward = sorted(f"{module} -> {dep}" for module, deps in _import_graph().items() for dep in deps
                    if rank[dep.split(".")[0]] > rank[module.split(".")[0]])
    assert upward == []


def test_the_product_the_runners_and_the_models_never_import_dagster():
    """Dagster is wiring: the product, the runners and the models never import it."""
    offenders = []
    for name, path in _modules().items():
        if name.split(".")[0] in ("models", "benchmark_runners", "devicefit"):
            tree = ast.parse(path.read_text())
            for node in ast.walk(tree):
                mods = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""] if isinstance(node, ast.ImportFrom) else []
                if any(m.split(".")[0] in ("dagster", "dagster_duckdb") for m in mods):
                    offenders.append(name)
    assert offenders == []
