"""specmon.engine"""
