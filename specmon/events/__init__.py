"""specmon.events"""
