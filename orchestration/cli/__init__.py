"""`retrain`: the command line (`commands`), the demo, the review and calibration commands.

`main` is the console script's entry point (`retrain = "orchestration.cli:main"`). The commands sit
above the Dagster wiring: they call `orchestration.runner` and the plain rooms, and no asset imports
them.
"""

from orchestration.cli.commands import main

__all__ = ["main"]
