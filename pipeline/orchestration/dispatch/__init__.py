"""Driving runs through the built-in dispatcher: `triggers` (ad-hoc runs, the service's builder, the
reaper, the nightly) and `bisect` (driving a bisection's jobs). The job queue itself (agents, device
presence, claims, leases, outcomes) is stored state: `pipeline.results.store.queue`."""
