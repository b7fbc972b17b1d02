"""The bearer-token check's cost per request (issue 9, item 7), side by side in one run.

Every request of every service passes the fast lane's one check
(``streamtx.service.auth``): the path rule, the token's principal, the role and
tenant test. Measured on the check itself (no HTTP), for a produce path:

* static tokens (constant-time compare against each configured token);
* a JWT, cached after its first verification (the LRU keyed by the token);
* the same JWT verified on every request (what the cache saves), HS256 and RS256.

The last line: ``auth: jwt cached X us, uncached hs256 Y us (Z x), rs256 W us``.
"""

from __future__ import annotations

import argparse
import timeit
from collections.abc import Callable

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from streamtx.auth import TokenVerifier, issue
from streamtx.service.auth import authorizer
from streamtx.service.settings import ServiceSettings

SECRET = "bench-secret-bench-secret-bench-secret"
PATH = "/v1/topics/a/n/x/messages"


def per_call_us(fn: Callable[[], object], number: int) -> float:
    return min(timeit.repeat(fn, number=number, repeat=5)) / number * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--number", type=int, default=100_000, help="calls per timing")
    ns = parser.parse_args()
    token = issue(SECRET, subject="app", roles=["client"], tenants=["a"])
    header = f"Bearer {token}"
    jwt_check = authorizer(ServiceSettings(auth_jwt_secret=SECRET))  # type: ignore[call-arg]
    static_check = authorizer(ServiceSettings(client_token="c" * 32, admin_token="a" * 32))  # type: ignore[call-arg]
    assert jwt_check is not None and static_check is not None
    static_header = "Bearer " + "c" * 32
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    private = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption()).decode()
    public = key.public_key().public_bytes(serialization.Encoding.PEM,
                                           serialization.PublicFormat.SubjectPublicKeyInfo).decode()
    rs_token = issue(private, subject="app", roles=["client"], tenants=["a"], algorithm="RS256")
    hs, rs = TokenVerifier(SECRET, "HS256"), TokenVerifier(public, "RS256")

    static_us = per_call_us(lambda: static_check("POST", PATH, static_header), ns.number)
    cached_us = per_call_us(lambda: jwt_check("POST", PATH, header), ns.number)
    hs_us = per_call_us(lambda: hs.verify(token), max(ns.number // 50, 100))
    rs_us = per_call_us(lambda: rs.verify(rs_token), max(ns.number // 100, 100))
    print(f"static tokens:            {static_us:8.2f} us per request")
    print(f"jwt, cached:              {cached_us:8.2f} us per request")
    print(f"jwt hs256, every request: {hs_us:8.2f} us per request")
    print(f"jwt rs256, every request: {rs_us:8.2f} us per request")
    print(f"auth: jwt cached {cached_us:.2f} us, uncached hs256 {hs_us:.1f} us ({hs_us / cached_us:.0f} x), "
          f"rs256 {rs_us:.1f} us")


if __name__ == "__main__":
    main()
