"""Password users of the web UI: created by an admin, checked at sign-in, disabled by name.

Passwords are hashed with scrypt (`hashlib.scrypt`, n=2**14, r=8, p=1: about 16 MiB and some tens
of milliseconds per check, RFC 7914's interactive parameters) and a 16-byte random salt; the
stored form is `scrypt$n$r$p$salt$hash`, so the parameters can be raised later without breaking
old hashes. A check against an unknown name still hashes once, so a response's timing does not
tell which names exist. Like `auth`, nothing here commits: the caller owns the transaction.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Sequence

from pipeline.service.auth import NAME_PATTERN, AuthError, Principal
from pipeline.results.store import accounts
from pipeline.results.store.accounts import UserOut
from pipeline.results.store.db import Session

__all__ = ["MAX_NAME", "MAX_PASSWORD", "MIN_PASSWORD", "UserOut", "check_password", "create_user", "disable_user",
           "hash_password", "list_users", "verify_password"]

SCRYPT_N, SCRYPT_R, SCRYPT_P = 2**14, 8, 1
MIN_PASSWORD = 8
MAX_PASSWORD = 1000
MAX_NAME = 100
"""A user's name: `auth.NAME_PATTERN`'s longest."""
USER_SCOPES = ("user", "admin")
_DUMMY_HASH = ""


def hash_password(password: str, *, n: int = SCRYPT_N, r: int = SCRYPT_R, p: int = SCRYPT_P) -> str:
    salt = secrets.token_bytes(16)
    digest = hashlib.scrypt(password.encode(), salt=salt, n=n, r=r, p=p, maxmem=128 * n * r * 2, dklen=32)
    return f"scrypt${n}${r}${p}${salt.hex()}${digest.hex()}"


def verify_password(password: str, stored: str) -> bool:
    """True when `password` hashes to `stored` (constant-time comparison)."""
    try:
        scheme, n, r, p, salt, digest = stored.split("$")
        if scheme != "scrypt":
            return False
        given = hashlib.scrypt(password.encode(), salt=bytes.fromhex(salt), n=int(n), r=int(r), p=int(p),
                               maxmem=128 * int(n) * int(r) * 2, dklen=len(digest) // 2)
    except ValueError:
        return False
    return hmac.compare_digest(given.hex(), digest)


def create_user(session: Session, *, name: str, password: str, scopes: Sequence[str] = ("user",)) -> UserOut:
    if not NAME_PATTERN.match(name):
        raise AuthError(f"name: {name!r} must be 1-100 letters, digits, '.', '_', '@' or '-', starting with a letter or digit")
    if len(password) < MIN_PASSWORD:
        raise AuthError(f"password: at least {MIN_PASSWORD} characters")
    wanted = list(dict.fromkeys(scopes))
    if not wanted or any(s not in USER_SCOPES for s in wanted):
        raise AuthError(f"scopes: a user holds {' and/or '.join(USER_SCOPES)}")
    if accounts.user_name_taken(session, name):
        raise AuthError(f"name: a user called {name!r} exists; choose another")
    return accounts.add_user(session, name=name, password_hash=hash_password(password),
                             scopes=[s for s in USER_SCOPES if s in wanted])


def check_password(session: Session, *, name: str, password: str) -> Principal | None:
    """The user's principal when the name and password match an enabled user; records the sign-in."""
    global _DUMMY_HASH
    stored = accounts.find_user(session, name)
    if stored is None or stored.user.disabled_at is not None:
        _DUMMY_HASH = _DUMMY_HASH or hash_password("not a password")
        verify_password(password, _DUMMY_HASH)  # the same work as a real check
        return None
    if not verify_password(password, stored.password_hash):
        return None
    row = stored.user
    accounts.record_sign_in(session, row.name)
    return Principal(name=row.name, scopes=frozenset(row.scopes))


def active_principal(session: Session, name: str) -> Principal | None:
    """The enabled user called `name` (a signed-in session is checked against this on each request)."""
    stored = accounts.find_user(session, name)
    if stored is None or stored.user.disabled_at is not None:
        return None
    return Principal(name=stored.user.name, scopes=frozenset(stored.user.scopes))


def disable_user(session: Session, *, name: str) -> UserOut:
    disabled = accounts.disable_user(session, name=name)
    if disabled is None:
        raise AuthError(f"name: no user called {name!r}")
    return disabled


def list_users(session: Session) -> list[UserOut]:
    return accounts.list_users(session)

