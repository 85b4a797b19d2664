"""`specmon <command>`."""

from specmon.cli.main import main

__all__ = ["main"]
