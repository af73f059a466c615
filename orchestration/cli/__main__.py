"""`python -m orchestration.cli ...`: the same command line as the `retrain` script (`make demo` runs it so)."""

import sys

from orchestration.cli.commands import main

sys.exit(main())
