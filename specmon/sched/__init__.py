"""Schedulers: each decides what the session driver decodes next (run pairing, sweep, policy, bench)."""
