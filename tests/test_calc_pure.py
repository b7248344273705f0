"""The calculators stay pure, documented and short (STYLE.md principle 8)."""

import ast
import inspect
import pathlib

import lab_utils.calc as calc
from lab_utils.tools.size import MAX_LOGICAL_LINES, logical_lines

CALC_DIR = pathlib.Path(calc.__file__).parent
MODULES = sorted(CALC_DIR.rglob("*.py"))


def test_no_torch_import_in_calc():
    for path in MODULES:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                mods = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                mods = [node.module or ""]
            else:
                continue
            assert not any(m.split(".")[0] == "torch" for m in mods), f"{path.name} imports torch"


def test_public_functions_name_source_and_lab():
    for name in calc.__all__:
        obj = getattr(calc, name)
        if inspect.isfunction(obj):
            doc = obj.__doc__ or ""
            assert "lab" in doc.lower(), f"{name}: docstring must name the lab"
        if inspect.isclass(obj):
            assert obj.__doc__, f"{name}: class needs a docstring"


def test_modules_stay_short():
    """Every calculator module within its budget, counted in logical lines. The index
    (__init__.py) is exempt, but it may hold no code of its own."""
    for path in MODULES:
        if path.name == "__init__.py":
            tree = ast.parse(path.read_text())
            defs = [n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))]
            assert not defs, f"calc/__init__.py is an index: move {defs} into a module"
            continue
        n = logical_lines(path)
        assert n <= MAX_LOGICAL_LINES, f"{path.name} says {n} logical lines; split it"
