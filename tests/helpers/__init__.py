"""Shared test helpers (temporary git repositories holding small suites)."""
