"""Comparison tables as people read them: terminal, and (later) pull-request comments."""
