"""`specmon <command>`."""

from specmon.cli.main import main as main  # the console script's entry point
