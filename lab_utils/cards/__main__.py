"""`python -m lab_utils.cards ...` (same as `python -m lab_utils cards ...`)."""

import sys

from lab_utils.cards import cli_main

sys.exit(cli_main())
