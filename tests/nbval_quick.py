"""The inner pytest of test_notebooks.py's nbval runs: ``python tests/nbval_quick.py NOTEBOOK``.

A pytest of its own per notebook (so xdist workers can take different notebooks at once), kept lean:
it is started 13 times per suite run, and two imports cost more CPU than most of what it does.
* No plugin auto-loading: only nbval, pytest-timeout (the ini file's per-test timeout) and our IPC
  kernels (lab_utils.tools.ipc_kernels). Loading every installed plugin cost ~2 CPU-s here, mostly
  hypothesis's end-of-run summary importing hypothesis.
* ``rfc3987_syntax`` not imported: jsonschema (under nbformat) builds that package's Lark grammar at
  import for its optional "iri" format check, 1.9-3.4 CPU-s; nbformat's schemas use no such format,
  and jsonschema skips the check when the package cannot be imported.
"""

import os
import sys


def main(notebooks: list[str]) -> int:
    sys.modules["rfc3987_syntax"] = (
        None  # an import of it now raises ImportError, which jsonschema allows
    )
    os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    import pytest

    return pytest.main(
        [
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "lab_utils.tools.ipc_kernels",
            "-p",
            "nbval.plugin",
            "-p",
            "pytest_timeout",
            "--nbval-lax",
            "--nbval-current-env",
            *notebooks,
        ]
    )


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
