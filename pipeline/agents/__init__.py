"""Device agents: discover devices, run bundle artifacts, check, time, report results."""
