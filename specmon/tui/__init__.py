"""specmon.tui"""
