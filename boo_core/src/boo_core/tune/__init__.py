"""Tuning: candidates (formulations x per-dispatch configurations x flags) compiled, verified
and timed per kernel; the fastest verified one is recorded and used by every launch."""
