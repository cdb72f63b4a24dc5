"""Tokens on both stores: created once and stored hashed, checked, revoked, scoped."""

from __future__ import annotations

import pytest
from sqlalchemy.orm import Session

from pipeline.service import auth

from tests.helpers import factories as f


def test_a_token_is_shown_once_and_stored_only_as_its_hash(session: Session) -> None:
    token = auth.create_token(session, name="agent-h100", scopes=["agent"])
    assert token.startswith(auth.TOKEN_PREFIX) and len(token) > 40
    stored = f.snapshot(session)["api_tokens"]
    assert len(stored) == 1
    assert token not in repr(stored)
    assert auth.hash_token(token) in stored[0]


def test_authenticate_knows_the_token_and_its_scopes(session: Session) -> None:
    token = auth.create_token(session, name="dev", scopes=["user", "agent", "user"])
    principal = auth.authenticate(session, token=token)
    assert principal is not None
    assert principal.name == "dev"
    assert principal.scopes == {"agent", "user"}
    assert principal.allows("agent") and principal.allows("user") and not principal.allows("admin")
    (info,) = auth.list_tokens(session)
    assert info.scopes == ["agent", "user"]
    assert info.last_used_at is not None


def test_wrong_empty_and_revoked_tokens_are_nobody(session: Session) -> None:
    token = auth.create_token(session, name="ci", scopes=["agent"])
    assert auth.authenticate(session, token=token + "x") is None
    assert auth.authenticate(session, token="") is None
    assert auth.has_active_tokens(session)
    auth.revoke_token(session, name="ci")
    assert auth.authenticate(session, token=token) is None
    assert not auth.has_active_tokens(session)
    assert auth.list_tokens(session)[0].revoked_at is not None


def test_the_bootstrap_token_is_an_admin(session: Session) -> None:
    principal = auth.authenticate(session, token="from-settings", bootstrap="from-settings")
    assert principal is not None and principal.allows("admin") and principal.allows("agent")
    assert auth.authenticate(session, token="other", bootstrap="from-settings") is None


def test_admin_holds_every_scope(session: Session) -> None:
    principal = auth.authenticate(session, token=auth.create_token(session, name="root", scopes=["admin"]))
    assert principal is not None and all(principal.allows(s) for s in auth.SCOPES)


@pytest.mark.parametrize(("name", "scopes", "named"), [
    ("x", ["superuser"], "unknown scope 'superuser'"),
    ("x", [], "at least one"),
    ("bad name", ["agent"], "name:"),
])
def test_bad_token_requests_are_refused(session: Session, name: str, scopes: list[str], named: str) -> None:
    with pytest.raises(auth.AuthError, match=named):
        auth.create_token(session, name=name, scopes=scopes)


def test_names_are_unique_even_after_revocation(session: Session) -> None:
    auth.create_token(session, name="a", scopes=["agent"])
    auth.revoke_token(session, name="a")
    with pytest.raises(auth.AuthError, match="exists"):
        auth.create_token(session, name="a", scopes=["agent"])
    with pytest.raises(auth.AuthError, match="no token called 'b'"):
        auth.revoke_token(session, name="b")
