"""How streamtx calls streamtx: one HTTP client and one retry policy, configured per caller."""

from streamtx.transport.http import HttpClient, encode_json, reply_error
from streamtx.transport.retry import ONCE, RetryPolicy, is_retriable

__all__ = ["ONCE", "HttpClient", "RetryPolicy", "encode_json", "is_retriable", "reply_error"]
