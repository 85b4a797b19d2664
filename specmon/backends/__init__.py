"""specmon.backends"""
