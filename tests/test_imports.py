"""The import graph of launch/, psmodes/ and benchmarks/, read from the source
with ``ast`` (nothing is imported, no MPI): no cycles, the launcher's layers
import one way (see launch/__init__.py), and every import inside a function
of launch/ says why it is there."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("launch", "psmodes", "benchmarks")
# which launch layers each may import; launch.cli, the entry point, is above them all
LAYERS = {"launch.remote": 0, "launch.faultkinds": 1, "launch.analysis": 2, "launch.driver": 3, "launch.experiments": 4,
          "launch.cli": 5}
def _modules() -> dict[str, Path]:
    out = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


MODULES = _modules()
TREES = {name: ast.parse(path.read_text(), str(path)) for name, path in MODULES.items()}


def _package(name: str) -> str:
    return name if MODULES[name].name == "__init__.py" else name.rpartition(".")[0]


def _import_nodes(tree: ast.AST):
    """(statement, whether it is inside a function or class) of every import, in one walk."""
    todo = [(tree, False)]
    while todo:
        node, nested = todo.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node, nested
            continue
        inner = nested or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
        todo += [(child, inner) for child in ast.iter_child_nodes(node) if not isinstance(child, ast.expr)]


def _imports_of(name: str) -> list[tuple[str, ast.stmt, bool]]:
    """(imported module of ours, the statement, whether it is nested) of every import in ``name``."""
    out = []
    for node, nested in _import_nodes(TREES[name]):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        else:
            if node.level:
                base = _package(name).split(".")
                base = base[: len(base) - node.level + 1]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            # `from pkg import mod` imports the module pkg.mod; `from mod import name` imports mod
            targets = [f"{source}.{a.name}" if f"{source}.{a.name}" in MODULES else source for a in node.names]
        for target in targets:
            while target and target not in MODULES:  # `import a.b.c` of a name inside a module
                target = target.rpartition(".")[0]
            if target and target != name:
                out.append((target, node, nested))
    return out


IMPORTS = {name: _imports_of(name) for name in MODULES}
GRAPH = {name: sorted({t for t, _, _ in IMPORTS[name]}) for name in MODULES}


def cycles() -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each as one cycle path."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in GRAPH[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(component)

    for v in GRAPH:
        if v not in index:
            visit(v)
    return [_path_through(c) for c in found]


def _path_through(component: set[str]) -> list[str]:
    """One cycle inside ``component``: start anywhere, follow edges inside it until a module repeats."""
    path = [min(component)]
    while True:
        nxt = min(w for w in GRAPH[path[-1]] if w in component)
        if nxt in path:
            return path[path.index(nxt):] + [nxt]
        path.append(nxt)


def _layer(name: str) -> str | None:
    return next((layer for layer in LAYERS if name == layer or name.startswith(layer + ".")), None)


def test_the_graph_sees_the_imports():
    """The parser finds relative, absolute and function-level imports (else the checks below prove nothing)."""
    assert "launch.driver.runner" in GRAPH["launch.cli"]
    assert "launch.analysis.summary" in GRAPH["launch.driver.runner"]
    assert "psmodes.config" in GRAPH["launch.driver.options"]
    assert "psmodes.checkpoint" in GRAPH["launch.experiments.chaos"]  # inside a function
    assert "benchmarks.registry" in GRAPH["psmodes.context"]


def test_no_import_cycles():
    bad = [" -> ".join(c) for c in cycles()]
    assert not bad, "import cycles: " + "; ".join(bad)


def test_launch_layers_import_one_way():
    """remote imports no other layer, faultkinds only remote, analysis those two, driver those and analysis,
    experiments driver and everything below;
    nothing imports launch.cli; psmodes and benchmarks import nothing of launch."""
    bad = []
    for name in MODULES:
        for target, node, _ in IMPORTS[name]:
            if not target.startswith("launch.") or target == "launch":
                continue
            where = f"{MODULES[name].relative_to(ROOT)}:{node.lineno}"
            if not name.startswith("launch"):
                bad.append(f"{where}: {name} imports {target} (only the launcher imports launch)")
                continue
            mine, theirs = _layer(name), _layer(target)
            if mine is None or theirs is None:
                bad.append(f"{where}: {name} or {target} is in no layer of launch/__init__.py")
            elif LAYERS[theirs] > LAYERS[mine] or (theirs == "launch.cli" and name != "launch.cli"):
                bad.append(f"{where}: {mine} imports {target}, a layer above it")
    assert not bad, "\n".join(bad)


def test_launch_imports_are_at_the_top_unless_they_say_why():
    """An import inside a function of launch/ is deliberate (a heavy library only some paths need):
    a comment on its line, or on the line above its group of imports, says so."""
    bad = []
    for name, path in MODULES.items():
        if not name.startswith("launch"):
            continue
        lines = path.read_text().splitlines()
        nested = {node.lineno for node, inner in _import_nodes(TREES[name]) if inner}
        for lineno in sorted(nested):
            i = lineno - 1
            while i > 0 and "#" not in lines[i] and lines[i - 1].strip().startswith(("import ", "from ")):
                i -= 1  # a group of imports: the comment may sit on its first line
            if "#" not in lines[i] and not (i > 0 and "#" in lines[i - 1]):
                bad.append(f"{path.relative_to(ROOT)}:{lineno}: {lines[lineno - 1].strip()}")
    assert not bad, "imports inside functions without a comment saying why:\n" + "\n".join(bad)
