"""specmon.telemetry"""
