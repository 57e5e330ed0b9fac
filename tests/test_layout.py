"""The package's layout: imports run one way between its layers, and mlflow stays at the edge.

cli -> api -> render / plots -> report -> analysis; report -> data <- store; util below all.
Every import is counted, those inside functions too, so a lazy import cannot hide a cycle.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).parent.parent / "itwin_report"
LAYERS = {  # package -> the packages it may import
    "cli": {
        "api",
        "render",
        "plots",
        "report",
        "traces",
        "analysis",
        "data",
        "store",
        "emulator",
        "util",
    },
    "api": {"render", "plots", "report", "traces", "analysis", "data", "store", "util"},
    "render": {"plots", "report", "traces", "analysis", "data", "util"},
    "plots": {"report", "analysis", "data", "util"},
    "report": {"traces", "analysis", "data", "util"},
    "traces": {"analysis", "data", "util"},
    "analysis": {"data", "util"},
    "store": {"data", "util"},
    "emulator": {"store", "data", "util"},
    "data": {"util"},
    "util": set(),
}
# every other module lives in a layer; options.py holds the argument rules the CLI and the API
# share (it imports only util)
TOP_LEVEL = {"__init__.py", "__main__.py", "api.py", "options.py"}


def _layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _imports() -> list[tuple[str, str, str]]:
    """(file, importing layer, imported layer) for every import of the package's own modules."""
    out = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE.parent)
        here = _layer(".".join(rel.with_suffix("").parts).removesuffix(".__init__"))
        here = here.removesuffix(".py") if here != "__init__" else ""
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names: list[str] = []
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("itwin_report"):
                names = [str(node.module)]
                if node.module == "itwin_report":
                    names = [f"itwin_report.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names if a.name.startswith("itwin_report")]
            for name in names:
                there = _layer(name)
                if there in LAYERS and there != here:
                    out.append((str(rel), here, there))
    return out


def test_every_module_is_in_a_layer() -> None:
    loose = [p.name for p in PACKAGE.glob("*.py") if p.name not in TOP_LEVEL]
    assert loose == [], f"modules outside the layers: {loose}"
    assert {
        p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()
    } == set(LAYERS) - {"api"}  # api.py is one module


def test_imports_run_one_way() -> None:
    wrong = [
        f"{file}: {here} imports {there}"
        for file, here, there in _imports()
        if here in LAYERS and there not in LAYERS[here]
    ]
    assert wrong == []


def test_the_layers_have_no_cycle() -> None:
    graph: dict[str, set[str]] = {}
    for _, here, there in _imports():
        if here in LAYERS:
            graph.setdefault(here, set()).add(there)
    seen: dict[str, int] = {}

    def visit(node: str, path: list[str]) -> None:
        assert seen.get(node) != 1, "cycle: " + " -> ".join([*path, node])
        if seen.get(node) == 2:
            return
        seen[node] = 1
        for nxt in sorted(graph.get(node, ())):
            visit(nxt, [*path, node])
        seen[node] = 2

    for layer in sorted(graph):
        visit(layer, [])


def test_mlflow_is_imported_by_the_store_and_the_emulator_only() -> None:
    users = set()
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            mods = []
            if isinstance(node, ast.ImportFrom):
                mods = [node.module or ""]
            elif isinstance(node, ast.Import):
                mods = [a.name for a in node.names]
            if any(m == "mlflow" or m.startswith("mlflow.") for m in mods):
                users.add(path.relative_to(PACKAGE).parts[0])
    assert users <= {"store", "emulator"}, users
