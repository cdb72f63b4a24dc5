"""The values a state, status or kind column of the store may hold: the store's vocabulary, which
the pages, the API and the commands outside the store name too (the tables check them:
`models._one_of`)."""

from __future__ import annotations

RUN_KINDS = ("local", "adhoc", "pr", "push", "nightly")
RUN_STATUSES = ("queued", "running", "done", "failed")
JOB_STATUSES = RUN_STATUSES
CASE_STATUSES = ("ok", "wrong", "error", "skipped")
COMPILE_STATUSES = ("built", "failed")
TRIAGE_STATES = ("needs triage", "noisy", "confirmed", "intended", "assigned", "fixed")
"""Dana's triage states; a change point's current state is its latest triage event."""
OPEN_STATES = ("needs triage", "confirmed", "assigned")
"""States in which a change point still asks for attention (counts on the dashboard, listed as a regression)."""
DIRECTIONS = ("regression", "improvement")
LIFECYCLE = ("suspected", "confirmed", "retracted")
"""What the analysis makes of a change point (`analysis`, `changepoints.analyse`): suspected (the
newest commits left their level, or the detector reports it and the confirmation rule does not hold
yet), confirmed (the detector reports it and the confirmation rule holds: what alerts announce),
retracted (it reported it once and later data refute it; kept with its triage, and with why).
Apart from the triage state: a person triages, the analysis confirms or retracts."""
AGENT_STATES = ("online", "offline")
BUILD_STATUSES = ("pending", "building", "done", "failed")
DELIVERY_STATES = ("pending", "done", "ignored", "failed")
REPORT_STATES = ("waiting", "posted", "kept", "failed", "superseded")
BISECTION_STATES = ("queued", "running", "done", "failed", "cancelled")
ACTIVE_BISECTION_STATES = ("queued", "running")
BISECTION_OUTCOMES = ("culprit", "several commits", "ambiguous", "not reproduced", "limit reached")
"""What a finished bisection found (`pipeline.orchestration.dispatch.bisect`): one culprit; the change spread over
several commits (not attributable to one); a culprit hidden among commits that could not be built
or run; the change not reproduced by paired runs; the step or device-time limit reached first."""
BISECTION_STEP_STATES = ("queued", "done", "skipped")
