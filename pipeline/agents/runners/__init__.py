"""Runners: execute one bundle entry on one kind of runtime (IREE today; the CUDA driver API later)."""
