"""The runtime's two floors (lab_utils/runtime/__init__.py): no import cycle inside runtime/, and
nothing outside runtime/ imports its engine. Imports are read with ast at any depth, so an import
deferred into a function counts: deferring one hides a cycle from Python, not from the design."""
import ast
import functools
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "lab_utils"


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@functools.cache
def import_graph() -> dict[str, set[str]]:
    """Module -> the lab_utils modules it imports (a name imported from a package counts as its
    submodule when one exists, else as the package)."""
    modules = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph = {}
    for name, path in modules.items():
        targets = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets |= {f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules
                            else node.module for a in node.names}
        graph[name] = {t for t in targets if t in modules and t != name}
    return graph


def cycles(graph: dict[str, set[str]], prefix: str) -> list[list[str]]:
    """The strongly connected groups (Tarjan) of more than one module among names under prefix."""
    nodes = [n for n in graph if n.startswith(prefix)]
    index, low, stack, on, found = {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if not w.startswith(prefix):
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while not group or group[-1] != v:
                group.append(stack.pop())
                on.discard(group[-1])
            if len(group) > 1:
                found.append(sorted(group))

    for v in nodes:
        if v not in index:
            visit(v)
    return found


def test_no_import_cycle_inside_the_runtime():
    assert cycles(import_graph(), "lab_utils.runtime") == []


def test_the_cycle_finder_finds_a_cycle():  # negative control
    a, b = "lab_utils.runtime.a", "lab_utils.runtime.b"
    assert cycles({a: {b}, b: {a}}, "lab_utils.runtime") == [[a, b]]


def test_nothing_outside_the_runtime_imports_its_engine():
    outside = {name: [t for t in targets if t.startswith("lab_utils.runtime.engine")]
               for name, targets in import_graph().items()
               if not name.startswith("lab_utils.runtime")}
    assert {name: found for name, found in outside.items() if found} == {}
