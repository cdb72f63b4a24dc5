"""API tokens: created once (the plaintext is shown then and never again), stored as a sha256
hash, checked in constant time, revoked by name.

Scopes (a token holds one or more):
- `agent`: upload results (result documents, batches, foreign formats);
- `user`: read private data (`web.public` false), trigger runs, triage;
- `admin`: everything, including managing tokens.

A plain sha256 (no salt, no slow hash) is enough because tokens are 256-bit random strings, not
passwords: nothing can be guessed from the hash, and a lookup by hash stays one indexed query.

The service also accepts one bootstrap token from the settings (`BENCHFARM_API_TOKEN`) as an
admin, so the embedded mode works without any row in `api_tokens`.

Like `ingest`, nothing here commits: the caller owns the transaction.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Literal, get_args

from pipeline.results.store import accounts
from pipeline.results.store.accounts import TokenOut
from pipeline.results.store.db import Session

__all__ = [
    "SCOPES",
    "TOKEN_PREFIX",
    "AuthError",
    "Principal",
    "Scope",
    "TokenOut",
    "authenticate",
    "create_token",
    "has_active_tokens",
    "hash_token",
    "list_tokens",
    "revoke_token",
]

Scope = Literal["agent", "user", "admin"]
SCOPES: tuple[Scope, ...] = get_args(Scope)
TOKEN_PREFIX = "bf_"
TOKEN_BYTES = 32
LAST_USED_RESOLUTION = timedelta(minutes=1)
"""last_used_at is rewritten at most this often, so that agents sharing a token do not all queue
on one row lock to record the same minute."""
BOOTSTRAP_NAME = "bootstrap (BENCHFARM_API_TOKEN)"
NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@\-]{0,99}$")


class AuthError(ValueError):
    """A token request that cannot be granted: unknown scope, name taken, unknown name."""


@dataclass(frozen=True)
class Principal:
    """Who a request acts as: a stored token or the bootstrap token."""

    name: str
    scopes: frozenset[str]

    def allows(self, scope: Scope) -> bool:
        return "admin" in self.scopes or scope in self.scopes


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def _checked_scopes(scopes: Iterable[str]) -> list[str]:
    wanted = list(dict.fromkeys(scopes))
    if not wanted:
        raise AuthError(f"scopes: a token needs at least one of {', '.join(SCOPES)}")
    unknown = [s for s in wanted if s not in SCOPES]
    if unknown:
        raise AuthError(f"scopes: unknown scope {unknown[0]!r}; known: {', '.join(SCOPES)}")
    return [s for s in SCOPES if s in wanted]


def create_token(session: Session, *, name: str, scopes: Sequence[str]) -> str:
    """A new token called `name` with `scopes`; returns the plaintext, which is not stored anywhere."""
    if not NAME_PATTERN.match(name):
        raise AuthError(f"name: {name!r} must be 1-100 letters, digits, '.', '_', '@' or '-', starting with a letter or digit")
    checked = _checked_scopes(scopes)
    if accounts.token_name_taken(session, name):
        raise AuthError(f"name: a token called {name!r} exists (revoked ones keep their name); choose another")
    token = TOKEN_PREFIX + secrets.token_urlsafe(TOKEN_BYTES)
    accounts.add_token(session, name=name, token_hash=hash_token(token), scopes=checked)
    return token


def authenticate(session: Session, *, token: str, bootstrap: str = "") -> Principal | None:
    """Who `token` is, or None for an unknown or revoked token.

    Both comparisons take constant time: the bootstrap token against the given one, and the
    stored hash against the hash of the given one. A stored token's last_used_at is updated in
    the caller's transaction (at most once per LAST_USED_RESOLUTION), so it records the last
    request that succeeded.
    """
    if not token:
        return None
    if bootstrap and hmac.compare_digest(token.encode(), bootstrap.encode()):
        return Principal(name=BOOTSTRAP_NAME, scopes=frozenset(SCOPES))
    digest = hash_token(token)
    stored = accounts.find_token(session, digest)
    if stored is None or not hmac.compare_digest(stored.token_hash, digest) or stored.token.revoked_at is not None:
        return None
    row, now = stored.token, datetime.now(UTC)
    if row.last_used_at is None or now - row.last_used_at >= LAST_USED_RESOLUTION:
        accounts.record_token_use(session, digest, now)
    return Principal(name=row.name, scopes=frozenset(row.scopes))


def revoke_token(session: Session, *, name: str) -> TokenOut:
    """Revoke the token called `name` (revoking twice keeps the first time)."""
    revoked = accounts.revoke_token(session, name=name)
    if revoked is None:
        raise AuthError(f"name: no token called {name!r}")
    return revoked


def list_tokens(session: Session) -> list[TokenOut]:
    return accounts.list_tokens(session)


def has_active_tokens(session: Session) -> bool:
    return accounts.has_active_tokens(session)

