"""Comparison tables as people read them: the terminal table (`table`), and the pull-request report
(`report`, `comment`: sticky comment plus check run or commit status) posted on GitHub (`github`), with
an outbox for reports that could not be posted yet (`outbox`).

Import the module you need: this package imports none of them, so that a command printing a table does
not load the GitHub client (PyGithub and its crypto take ~0.15 s to import)."""
