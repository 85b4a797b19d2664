"""specmon.replay"""
