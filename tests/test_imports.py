"""No import cycle anywhere in lab_utils, and no module imports another module's private name.

Static: every `lab_utils/**/*.py` is parsed with `ast`; every `import` / `from ... import` at any
depth counts (a deferred import inside a function still ties two modules together: it only moves
the failure from import time to call time). A name is resolved to the longest module that exists:
`from lab_utils.calc import planner` is an arrow to `lab_utils.calc.planner`,
`from lab_utils.calc import GB` one to the package `lab_utils.calc`. Importing a submodule does not
count as an arrow to its parent packages (Python runs their `__init__` first, but a package index
that re-exports its own modules would otherwise be a "cycle" with each of them).

Cycles are the strongly connected groups of that graph (Tarjan). A failure names each group, one
cycle through it, and every arrow of the cycle with its file, line and whether it is deferred.
"""

from __future__ import annotations

import ast
import functools
import pathlib
from collections import deque
from dataclasses import dataclass

import lab_utils

ROOT = pathlib.Path(lab_utils.__file__).parent

# Cycles in other areas of the code that their owners are removing at the time this test was
# written (issue 34). Each entry is a set of modules: a cycle whose modules all lie in one entry is
# reported as expected, not as a failure. An entry that matches no cycle any more fails the test, so
# that it is deleted: the list only shrinks. The goal is an empty list.
EXPECTED_TO_BE_REMOVED: list[frozenset[str]] = []
# The same for private names imported across modules: (importing module, imported name).
EXPECTED_PRIVATE_IMPORTS_TO_BE_REMOVED: set[tuple[str, str]] = {
    ("lab_utils.calc._layout_cost", "lab_utils.calc.activations._layer_bytes"),  # "calc"
}


@dataclass(frozen=True)
class Arrow:
    source: str
    target: str
    path: str
    line: int
    deferred: bool  # inside a function (runs at call time), not at import time

    def __str__(self) -> str:
        when = "deferred, in a function" if self.deferred else "at import"
        return f"{self.source} -> {self.target}  ({self.path}:{self.line}, {when})"


def module_files(root: pathlib.Path = ROOT) -> dict[str, pathlib.Path]:
    """Dotted module name -> file, for every .py under `root` (a package is its __init__)."""
    base = root.parent
    found = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(base).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


@functools.lru_cache(maxsize=None)
def _parse(path: pathlib.Path) -> ast.Module:
    """Each file is parsed once per test session."""
    return ast.parse(path.read_text(), filename=str(path))


def _where(path: pathlib.Path) -> str:
    return str(path.relative_to(ROOT.parent)) if path.is_relative_to(ROOT.parent) else str(path)


def _resolve(name: str, modules: dict[str, pathlib.Path]) -> str | None:
    """The longest existing module that `name` (a dotted module or module.attribute) names."""
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        candidate = ".".join(parts[:end])
        if candidate in modules:
            return candidate
    return None


def _absolute(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    """The absolute module of a (possibly relative) `from ... import`."""
    if not node.level:
        return node.module or ""
    package = module.split(".") if is_package else module.split(".")[:-1]
    base = package[: len(package) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


def _deferred_nodes(tree: ast.Module) -> set[int]:
    """ids of the import nodes that sit inside a function body."""
    inside = set()
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            inside.update(
                id(n) for n in ast.walk(fn) if isinstance(n, (ast.Import, ast.ImportFrom))
            )
    return inside


def _type_checking_nodes(tree: ast.Module) -> set[int]:
    """ids of the import nodes under ``if TYPE_CHECKING:`` (never run: not an arrow)."""
    skip = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip.update(
                id(n)
                for stmt in node.body
                for n in ast.walk(stmt)
                if isinstance(n, (ast.Import, ast.ImportFrom))
            )
    return skip


def _imported(node: ast.AST, module: str, is_package: bool) -> list[tuple[str, str]]:
    """(dotted name as written, the imported name) for one import node."""
    if isinstance(node, ast.Import):
        return [(a.name, a.name.rsplit(".", 1)[-1]) for a in node.names]
    source = _absolute(node, module, is_package)
    return [(f"{source}.{a.name}" if source else a.name, a.name) for a in node.names]


def arrows(modules: dict[str, pathlib.Path] | None = None) -> list[Arrow]:
    """Every import arrow between two lab_utils modules."""
    modules = module_files() if modules is None else modules
    found = []
    for module, path in modules.items():
        tree = _parse(path)
        deferred, typing_only = _deferred_nodes(tree), _type_checking_nodes(tree)
        for node in ast.walk(tree):
            if not isinstance(node, (ast.Import, ast.ImportFrom)) or id(node) in typing_only:
                continue
            for dotted, _ in _imported(node, module, path.name == "__init__.py"):
                target = _resolve(dotted, modules)
                if target and target != module:
                    found.append(
                        Arrow(module, target, _where(path), node.lineno, id(node) in deferred)
                    )
    return found


def private_imports(modules: dict[str, pathlib.Path] | None = None) -> list[tuple[str, str, str]]:
    """(where, importing module, imported name) for each `from lab_utils.x import _name` where
    _name belongs to another module (a private submodule such as `calc._check` is not counted)."""
    modules = module_files() if modules is None else modules
    roots = {name.split(".")[0] for name in modules}
    found = []
    for module, path in modules.items():
        for node in ast.walk(_parse(path)):
            if not isinstance(node, ast.ImportFrom):
                continue
            source = _absolute(node, module, path.name == "__init__.py")
            for alias in node.names:
                name = alias.name
                private = name.startswith("_") and not name.startswith("__")
                if (
                    private
                    and source.split(".")[0] in roots
                    and source != module
                    and f"{source}.{name}" not in modules
                ):
                    found.append((f"{_where(path)}:{node.lineno}", module, f"{source}.{name}"))
    return found


def strongly_connected(graph: dict[str, set[str]]) -> list[set[str]]:
    """Tarjan's strongly connected components with more than one module (iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.add(member)
                    if member == node:
                        break
                if len(group) > 1:
                    groups.append(group)
    return groups


def one_cycle(group: set[str], by_pair: dict[tuple[str, str], Arrow]) -> list[Arrow]:
    """The shortest cycle through the group's first module (breadth-first), as arrows."""
    start = min(group)
    inside: dict[str, list[str]] = {}
    for source, target in sorted(by_pair):
        if source in group and target in group:
            inside.setdefault(source, []).append(target)
    came_from: dict[str, str] = {}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for target in inside.get(node, ()):
            if target == start:
                path = [node]
                while path[-1] != start:
                    path.append(came_from[path[-1]])
                path.reverse()
                return [by_pair[hop] for hop in zip(path, path[1:] + [start])]
            if target not in came_from:
                came_from[target] = node
                queue.append(target)
    raise AssertionError(f"no cycle through {start}")


def cycles(found: list[Arrow] | None = None) -> list[tuple[set[str], list[Arrow]]]:
    """Each strongly connected group of modules, with one cycle through it."""
    found = arrows() if found is None else found
    graph: dict[str, set[str]] = {}
    by_pair: dict[tuple[str, str], Arrow] = {}
    for arrow in found:
        graph.setdefault(arrow.source, set()).add(arrow.target)
        graph.setdefault(arrow.target, set())
        pair = (arrow.source, arrow.target)
        if pair not in by_pair or (by_pair[pair].deferred and not arrow.deferred):
            by_pair[pair] = arrow  # an import-time arrow describes the pair better
    return [(group, one_cycle(group, by_pair)) for group in strongly_connected(graph)]


def describe(group: set[str], cycle: list[Arrow]) -> str:
    lines = [f"{len(group)} modules: {', '.join(sorted(group))}", "  one cycle through them:"]
    lines += [f"    {arrow}" for arrow in cycle]
    return "\n".join(lines)


def test_the_graph_sees_known_arrows():
    """A negative control: the reader finds an arrow we know exists, deferred or not."""
    pairs = {(a.source, a.target) for a in arrows()}
    assert ("lab_utils.experiments.lab04.ddp", "lab_utils.parallel.data_parallel") in pairs
    assert ("lab_utils.runtime.launch", "lab_utils.runtime.context") in pairs


def test_the_cycle_finder_finds_a_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert strongly_connected(graph) == [{"a", "b", "c"}]
    by_pair = {(s, t): Arrow(s, t, "x.py", 1, False) for s in graph for t in graph[s]}
    assert [(a.source, a.target) for a in one_cycle({"a", "b", "c"}, by_pair)] == [
        ("a", "b"),
        ("b", "c"),
        ("c", "a"),
    ]


def test_a_deferred_cycle_and_a_private_import_are_found(tmp_path):
    """A negative control on a throw-away package: a cycle closed by a deferred import."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from pkg.b import _helper\n")
    (pkg / "b.py").write_text("def _helper():\n    from pkg import a\n")
    modules = module_files(pkg)
    [(group, cycle)] = cycles(arrows(modules))
    assert group == {"pkg.a", "pkg.b"}
    assert [(a.source, a.target, a.line, a.deferred) for a in cycle] == [
        ("pkg.a", "pkg.b", 1, False),
        ("pkg.b", "pkg.a", 2, True),
    ]
    assert "deferred, in a function" in describe(group, cycle)
    assert [found[1:] for found in private_imports(modules)] == [("pkg.a", "pkg.b._helper")]


def test_no_import_cycle_in_lab_utils():
    unexpected, matched = [], set()
    for group, cycle in cycles():
        owners = [entry for entry in EXPECTED_TO_BE_REMOVED if group <= entry]
        if owners:
            matched.update(owners)
        else:
            unexpected.append(describe(group, cycle))
    stale = [sorted(entry) for entry in EXPECTED_TO_BE_REMOVED if entry not in matched]
    assert not unexpected, "import cycles in lab_utils:\n" + "\n".join(unexpected)
    assert not stale, f"these cycles are gone; delete them from EXPECTED_TO_BE_REMOVED: {stale}"


def test_no_module_imports_another_modules_private_name():
    found = private_imports()
    unexpected = [
        f"{where}: {module} imports {name}"
        for where, module, name in found
        if (module, name) not in EXPECTED_PRIVATE_IMPORTS_TO_BE_REMOVED
    ]
    stale = EXPECTED_PRIVATE_IMPORTS_TO_BE_REMOVED - {(module, name) for _, module, name in found}
    assert not unexpected, "private names imported across modules:\n" + "\n".join(unexpected)
    assert not stale, f"gone; delete them from EXPECTED_PRIVATE_IMPORTS_TO_BE_REMOVED: {stale}"
