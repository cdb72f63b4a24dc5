"""Comparison tables as people read them: the terminal table, and the pull-request report
(sticky comment plus check run or commit status) posted on GitHub, with an outbox for reports
that could not be posted yet."""

from pipeline.pr_comments.comment import (
    MARKER,
    CommentSettings,
    comment_marker,
    render_comment,
)
from pipeline.pr_comments.github import GitHubError, GitHubPoster, Posted
from pipeline.pr_comments.markdown import Md, md_escape
from pipeline.pr_comments.outbox import Delivery, Outbox, deliver, flush
from pipeline.pr_comments.report import (
    Report,
    conclusion_for,
    make_report,
    report_for_commit,
)

__all__ = [
    "MARKER", "CommentSettings", "Delivery", "GitHubError", "GitHubPoster", "Md", "Outbox", "Posted", "Report",
    "comment_marker", "conclusion_for", "deliver", "flush", "make_report", "md_escape", "render_comment", "report_for_commit",
]
