"""specmon.metrics"""
