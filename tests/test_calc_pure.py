"""The calculators stay pure, documented and short (STYLE.md principle 8)."""

import ast
import inspect
import pathlib

import lab_utils.calc as calc

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
    for path in MODULES:
        n = len(path.read_text().splitlines())
        assert n < 300, f"{path.name} has {n} lines; split it"
