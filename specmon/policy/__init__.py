"""specmon.policy"""
