"""Who may call: accounts, roles and API tokens (contract §6). Pure rules, no storage."""

from __future__ import annotations

import hashlib
import re
import secrets

from ledger.errors import TokenError
from ledger.identifiers import unsafe_character

ROLES = ("agent", "operator", "auditor", "approver")
DETAIL_ROLES = ("operator", "auditor")  # may read raw failure detail; agents may not
# May hold `*` (a whole deployment): every role but the agent's (an approver decides parked
# calls, docs/approvals.md).
WIDE_ROLES = ("operator", "auditor", "approver")
ALL_ACCOUNTS = "*"  # operators and auditors of a whole deployment; never an agent's account
# \A and \Z, not ^ and $: `$` also matches before a final newline, and 'acme\n' would be a
# second account that shows as 'acme'. Checked with fullmatch all the same.
ACCOUNT_PATTERN = r"\A[a-z0-9][a-z0-9_-]*\Z"
_ACCOUNT = re.compile(ACCOUNT_PATTERN)
TOKEN_PREFIX = "ol_"


def token_stream(token_id: str) -> str:
    return f"token-{token_id}"


def validate_account(account: str, *, allow_all: bool = True) -> str:
    if (allow_all and account == ALL_ACCOUNTS) or _ACCOUNT.fullmatch(account):
        return account
    found = unsafe_character(account)
    holds = f" (it holds {found[1]} at character {found[0] + 1})" if found else ""
    raise TokenError(f"account {account!r} must match [a-z0-9][a-z0-9_-]* (or '*' for all){holds}")


def validate_role(role: str) -> str:
    if role not in ROLES:
        raise TokenError(f"role {role!r} must be one of {', '.join(ROLES)}")
    return role


def admissible(account: str, role: str) -> bool:
    """`*` reads every account: an operator's or auditor's scope, never an agent's."""
    return account != ALL_ACCOUNTS or role in WIDE_ROLES


def validate_scope(account: str, role: str) -> None:
    if not admissible(account, role):
        raise TokenError(
            f"{role} tokens belong to one account; '*' is for {', '.join(WIDE_ROLES)} tokens"
        )


def new_token() -> str:
    """A fresh secret; only its hash is ever stored."""
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def account_scope(account: str) -> str | None:
    """The account whose rows a token of `account` may see; None: every account."""
    return None if account == ALL_ACCOUNTS else account


def may_see(token_account: str, account: str) -> bool:
    return token_account in (ALL_ACCOUNTS, account)
