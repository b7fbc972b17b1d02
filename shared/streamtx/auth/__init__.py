"""Who may call what: token claims (:mod:`.tokens`) and the path rule (:mod:`.policy`). Pure, no HTTP."""

from streamtx.auth.policy import Denial, check, rule_of
from streamtx.auth.tokens import ROLES, Principal, TokenError, TokenVerifier, issue

__all__ = ["ROLES", "Denial", "Principal", "TokenError", "TokenVerifier", "check", "issue", "rule_of"]
