"""pipeline/results/store/commit_refs.py on a real store (SQLite and PostgreSQL): the commit references people type."""

from __future__ import annotations

import re

import pytest
from sqlalchemy import Engine

from pipeline.results.store import ingest
from pipeline.results.store.commit_refs import CommitRefError, commits_named, resolve_commit
from pipeline.results.store.db import session_scope
from tests.helpers import factories as f


def test_a_sha_or_its_first_hex_digits_name_one_recorded_commit(seeded: Engine) -> None:
    with session_scope(seeded) as s:
        ingest.upsert_repository(s, name="other", url="https://example.com/other")
        ingest.record_commits(s, repository=f.REPO, commits=[f.commit(161), f.commit(244)])  # both 0159...
        ingest.record_commits(s, repository="other", commits=[f.commit(1)])

        assert resolve_commit(s, f.sha(2), repository=f.REPO) == (f.REPO, f.sha(2))
        assert resolve_commit(s, f" {f.sha(2)[:10].upper()} ", repository=f.REPO) == (f.REPO, f.sha(2))
        assert resolve_commit(s, f.sha(2)[:4]) == (f.REPO, f.sha(2))
        # the same commit in two repositories: one with the repository named, several without
        assert resolve_commit(s, f.sha(1)[:7], repository="other") == ("other", f.sha(1))
        with pytest.raises(CommitRefError, match=rf"names several recorded commits \({re.escape(f.REPO)}@{f.sha(1)[:12]}, "
                                                 rf"other@{f.sha(1)[:12]}\)"):
            resolve_commit(s, f.sha(1)[:7])
        with pytest.raises(CommitRefError, match=rf"'0159' names several recorded commits of {re.escape(f.REPO)} "
                                                 rf"\({f.sha(244)[:12]}, {f.sha(161)[:12]}\)"):
            resolve_commit(s, "0159", repository=f.REPO)
        assert resolve_commit(s, "0159a", repository=f.REPO) == (f.REPO, f.sha(161))

        for nothing in ("", f.sha(2)[:3], "HEAD", "main", "0159%", "zz" + f.sha(2)[2:]):
            assert commits_named(s, nothing) == [], nothing
            with pytest.raises(CommitRefError, match="no recorded commit"):
                resolve_commit(s, nothing, repository=f.REPO)
        assert len(commits_named(s, "0", limit=3)) == 0   # under 4 digits names nothing, however many match
