"""`python -m lab_utils ...`: see lab_utils/cli.py."""

import sys

from lab_utils.cli import main

sys.exit(main())
