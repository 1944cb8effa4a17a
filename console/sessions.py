"""Console sessions, held server-side: the browser keeps only a random id in an HttpOnly,
SameSite=Strict cookie. A session remembers which token signed in (its id, role and account),
never the token itself, so no secret sits in this process's memory after sign-in.

One session per token: signing in opens a new session (a new id: never one a page saw before)
and ends the browser's previous one and every other session of the same token."""

from __future__ import annotations

import hashlib
import secrets
import threading
import time
from dataclasses import dataclass

from ledger.token_view import TokenView

COOKIE = "outcomes_console"
PATH = "/console"
IDLE_S = 8 * 3600.0  # a console left alone this long signs out
MAX_AGE_S = 12 * 3600.0  # and no session outlives a working day
MAX_SESSIONS = 10_000  # the oldest go first: an unauthenticated flood cannot grow memory


@dataclass
class Session:
    token_id: str
    role: str
    account: str
    started: float
    seen: float


class Sessions:
    """In this process's memory (one `outcomes serve`); a restart signs everybody out."""

    def __init__(self) -> None:
        self._by_key: dict[str, Session] = {}
        self._lock = threading.Lock()

    def open(self, token: TokenView, replacing: str | None = None) -> str:
        """A new session for this (already admitted) token, which ends `replacing` (the
        browser's cookie, if any) and the token's other sessions; returns the cookie's value."""
        sid = secrets.token_urlsafe(32)
        moment = time.monotonic()
        with self._lock:
            self._expire(moment)
            if replacing:
                self._by_key.pop(_key(replacing), None)
            for key in [k for k, s in self._by_key.items() if s.token_id == token.token_id]:
                del self._by_key[key]
            while len(self._by_key) >= MAX_SESSIONS:
                oldest = min(self._by_key, key=lambda k: self._by_key[k].started)
                del self._by_key[oldest]
            self._by_key[_key(sid)] = Session(
                token.token_id, token.role, token.account, moment, moment
            )
        return sid

    def get(self, sid: str | None) -> Session | None:
        if not sid:
            return None
        moment = time.monotonic()
        with self._lock:
            found = self._by_key.get(_key(sid))
            if found is None:
                return None
            if _expired(found, moment):
                del self._by_key[_key(sid)]
                return None
            found.seen = moment
            return found

    def close(self, sid: str | None) -> None:
        if sid:
            with self._lock:
                self._by_key.pop(_key(sid), None)

    def _expire(self, moment: float) -> None:
        for key in [k for k, s in self._by_key.items() if _expired(s, moment)]:
            del self._by_key[key]


def _key(sid: str) -> str:
    # Stored by hash: a look at this process's memory yields no usable cookie.
    return hashlib.sha256(sid.encode()).hexdigest()


def _expired(session: Session, moment: float) -> bool:
    return moment - session.seen > IDLE_S or moment - session.started > MAX_AGE_S
