"""API tokens and password users as stored: rows in, the API's documents out (`TokenOut`, `UserOut`;
with the stored hash where a check needs it). What a token or a password means (hashing,
constant-time checks, scopes) is `pipeline.service.auth` and `pipeline.service.users`; only their
hashes reach the store. Nothing here commits: the caller owns the transaction."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa
from pydantic import BaseModel, ConfigDict
from sqlalchemy.orm import Session

from pipeline.results.store.models import ApiToken, User, utcnow

__all__ = ["StoredToken", "StoredUser", "TokenOut", "UserOut", "add_token", "add_user", "delete_tokens_named", "disable_user",
           "find_token", "find_user", "has_active_tokens", "list_tokens", "list_users", "record_sign_in",
           "record_token_use", "revoke_token", "token_name_taken", "user_name_taken"]


# What may be shown about a token: everything but the token and its hash. The API's document
# (a docstring would be its description there).
class TokenOut(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str
    scopes: list[str]
    created_at: datetime
    last_used_at: datetime | None
    revoked_at: datetime | None


class UserOut(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str
    scopes: list[str]
    created_at: datetime
    last_login_at: datetime | None
    disabled_at: datetime | None


@dataclass(frozen=True)
class StoredToken:
    """A token as a check needs it: what may be shown, and the stored hash."""

    token: TokenOut
    token_hash: str


@dataclass(frozen=True)
class StoredUser:
    """A user as a sign-in needs it: what may be shown, and the stored password hash."""

    user: UserOut
    password_hash: str


def _token(row: ApiToken) -> TokenOut:
    return TokenOut(name=row.name, scopes=list(row.scopes), created_at=row.created_at,
                    last_used_at=row.last_used_at, revoked_at=row.revoked_at)


def _user(row: User) -> UserOut:
    return UserOut(name=row.name, scopes=list(row.scopes), created_at=row.created_at,
                   last_login_at=row.last_login_at, disabled_at=row.disabled_at)


# --- tokens ----------------------------------------------------------------------------------


def token_name_taken(session: Session, name: str) -> bool:
    """Whether a token (revoked or not: revoked ones keep their name) is called `name`."""
    return session.scalar(sa.select(ApiToken.id).where(ApiToken.name == name)) is not None


def add_token(session: Session, *, name: str, token_hash: str, scopes: Sequence[str]) -> None:
    session.add(ApiToken(name=name, token_hash=token_hash, scopes=list(scopes), created_at=utcnow()))
    session.flush()


def find_token(session: Session, token_hash: str) -> StoredToken | None:
    """The token with this hash (an indexed lookup), revoked or not."""
    row = session.scalar(sa.select(ApiToken).where(ApiToken.token_hash == token_hash))
    return StoredToken(_token(row), row.token_hash) if row is not None else None


def record_token_use(session: Session, token_hash: str, at: datetime) -> None:
    """The token was used at `at` (its `last_used_at`)."""
    session.execute(sa.update(ApiToken).where(ApiToken.token_hash == token_hash).values(last_used_at=at))


def revoke_token(session: Session, *, name: str) -> TokenOut | None:
    """Revoke the token called `name` (revoking twice keeps the first time); None: no such token."""
    row = session.scalar(sa.select(ApiToken).where(ApiToken.name == name))
    if row is None:
        return None
    if row.revoked_at is None:
        row.revoked_at = utcnow()
        session.flush()
    return _token(row)


def list_tokens(session: Session) -> list[TokenOut]:
    """Every token, oldest first."""
    return [_token(row) for row in session.scalars(sa.select(ApiToken).order_by(ApiToken.created_at, ApiToken.id))]


def has_active_tokens(session: Session) -> bool:
    return session.scalar(sa.select(ApiToken.id).where(ApiToken.revoked_at.is_(None)).limit(1)) is not None


def delete_tokens_named(session: Session, prefix: str) -> None:
    """Delete the tokens whose names start with `prefix` (the embedded agent's, made and dropped per process)."""
    session.execute(sa.delete(ApiToken).where(ApiToken.name.startswith(prefix, autoescape=True)))


# --- users -----------------------------------------------------------------------------------


def user_name_taken(session: Session, name: str) -> bool:
    return session.scalar(sa.select(User.id).where(User.name == name)) is not None


def add_user(session: Session, *, name: str, password_hash: str, scopes: Sequence[str]) -> UserOut:
    row = User(name=name, password_hash=password_hash, scopes=list(scopes), created_at=utcnow())
    session.add(row)
    session.flush()
    return _user(row)


def find_user(session: Session, name: str) -> StoredUser | None:
    """The user called `name`, enabled or not."""
    row = session.scalar(sa.select(User).where(User.name == name))
    return StoredUser(_user(row), row.password_hash) if row is not None else None


def record_sign_in(session: Session, name: str) -> None:
    """The user signed in now (its `last_login_at`)."""
    session.execute(sa.update(User).where(User.name == name).values(last_login_at=utcnow()))


def disable_user(session: Session, *, name: str) -> UserOut | None:
    """Disable the user called `name` (disabling twice keeps the first time); None: no such user."""
    row = session.scalar(sa.select(User).where(User.name == name))
    if row is None:
        return None
    if row.disabled_at is None:
        row.disabled_at = utcnow()
        session.flush()
    return _user(row)


def list_users(session: Session) -> list[UserOut]:
    """Every user, oldest first."""
    return [_user(row) for row in session.scalars(sa.select(User).order_by(User.created_at, User.id))]
