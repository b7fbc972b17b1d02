"""Property-based fuzzing of every service's OpenAPI with schemathesis (issue 9, item 14).

The four services run as real processes (auth on, the admin token, which
may call every route). For each operation schemathesis generates requests
from the OpenAPI document - valid and invalid bodies, queries and path
parameters - and every answer must pass every check schemathesis has (issue 21
item 13): not a 5xx, a documented status, headers and content type, a 2xx that
matches its documented schema, no schema-valid request refused (400, 413) and no
schema-invalid one accepted, a 405 for an undocumented method with ``Allow``;
and an error in the API's shape (``{"error": code, "message": text}``). The documents themselves must be valid
OpenAPI with every ``$ref`` resolving. Bounded: ``STREAMTX_FUZZ_EXAMPLES``
cases per operation (15; about 60 operations), the same ones every run;
``STREAMTX_FUZZ_RANDOM=1`` with more examples hunts for new ones by hand, from a seed it
prints with any failure (``STREAMTX_FUZZ_SEED`` replays it). A failure keeps its example
(as curl), its traceback and that replay line. A run stops fuzzing at 80% of its timeout
and fails naming the operations left, rather than being cut by the timeout mark (which
Hypothesis took for a failing example and shrank past the mark: 687 s under 600).
Every path is also sent every method it does not document: a 405 whose ``Allow`` names
exactly the documented ones (issue 38).
The fuzzer's finds so far stay covered by ``test_what_the_fuzzer_found_stays_fixed``.
"""

from __future__ import annotations

import json
import os
import random
import re
import time
import traceback
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st
from openapi_spec_validator import validate
from schemathesis import GenerationMode

from tests.support.suite import ORDER, Suite

TOKEN = "fuzz-admin-token"
FUZZ_EXAMPLES = int(os.environ.get("STREAMTX_FUZZ_EXAMPLES", "15"))
#: CI replays the same cases every run; STREAMTX_FUZZ_RANDOM=1 explores new ones (a longer hunt, by hand).
FUZZ_RANDOM = os.environ.get("STREAMTX_FUZZ_RANDOM") == "1"
#: A hunt's seed (printed with its failures; set it to replay one); CI's runs are derandomized.
FUZZ_SEED = int(os.environ.get("STREAMTX_FUZZ_SEED") or random.randrange(1 << 32)) if FUZZ_RANDOM else None
FUZZ_TIMEOUT_S = max(300, 12 * FUZZ_EXAMPLES)


@pytest.fixture(scope="module")
def suite(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Suite]:
    tmp = tmp_path_factory.mktemp("fuzz")
    with Suite(f"file://{tmp / 'ledgers'}", tmp, env={"STREAMTX_ADMIN_TOKEN": TOKEN},
               services=ORDER) as running:
        with httpx.Client(base_url=running.broker.url, headers={"authorization": f"Bearer {TOKEN}"}) as c:
            # Something real to hit besides made-up names.
            assert c.put("/admin/v2/persistent/a/n/x/partitions", json={"partitions": 2}).status_code == 200
            assert c.put("/v1/topics/a/n/x/subscriptions/s").status_code == 200
        yield running


def refs(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "$ref" and isinstance(value, str):
                yield value
            else:
                yield from refs(value)
    elif isinstance(node, list):
        for item in node:
            yield from refs(item)


def resolve(doc: dict[str, Any], ref: str) -> Any:
    assert ref.startswith("#/"), ref
    node: Any = doc
    for part in ref[2:].split("/"):
        assert isinstance(node, dict) and part in node, f"{ref} does not resolve"
        node = node[part]
    return node


@pytest.mark.parametrize("service", ORDER)
def test_openapi_documents_are_valid(suite: Suite, service: str) -> None:
    doc = httpx.get(suite.procs[service].url + "/openapi.json").json()
    validate(doc)
    for ref in set(refs(doc)):
        resolve(doc, ref)


def test_names_are_checked_as_pulsar_does(suite: Suite) -> None:
    """Item 13: a control character, a private-use code point, 256 characters, a partition suffix:
    400 in the API's error shape, and nothing is created."""
    headers = {"authorization": f"Bearer {TOKEN}"}
    broker = httpx.Client(base_url=suite.broker.url, headers=headers)
    bad = ["x\x01y", "pua\ue000", "z" * 256, "sp ace"]
    for name in bad:
        q = quote(name, safe="")
        for path in (f"/admin/v2/persistent/a/n/{q}/partitions", f"/admin/v2/persistent/{q}/n/x/partitions",
                     f"/admin/v2/persistent/a/{q}/x/partitions"):
            r = broker.put(path, json={"partitions": 1})
            assert r.status_code == 400 and r.json()["error"] == "malformed", (name, r.text)
        r = broker.put(f"/v1/topics/a/n/x/subscriptions/{q}")
        assert r.status_code == 400 and r.json()["error"] == "malformed", (name, r.text)
        r = broker.post(f"/v1/topics/a/n/{q}/messages", json={"messages": []})
        assert r.status_code == 400 and r.json()["error"] == "malformed", (name, r.text)
    r = broker.put("/admin/v2/persistent/a/n/y-partition-0/partitions", json={"partitions": 1})
    assert r.status_code == 400 and "-partition-" in r.json()["message"], r.text
    assert broker.get("/admin/v2/persistent/a/n/y-partition-0/partitions").status_code == 404
    tc = httpx.Client(base_url=suite.coordinator.url, headers=headers)
    txn = tc.post("/v1/transactions").json()["txn_id"]
    for body in ({"partitions": ["persistent://a/n/x\x01-partition-0"]},):
        r = tc.post(f"/v1/transactions/{txn}/partitions", json=body)
        assert r.status_code == 400 and r.json()["error"] == "malformed", r.text
    r = tc.post(f"/v1/transactions/{txn}/subscriptions",
                json={"subscriptions": [{"topic": "persistent://a/n/x", "subscription": "s\ue000"}]})
    assert r.status_code == 400, r.text
    pa = httpx.Client(base_url=suite.pendingack.url, headers=headers)
    r = pa.post("/v1/pendingack/acks", json={"topic": "persistent://a/n/x-partition-0",
                                             "subscription": "\x7f", "txn_id": txn, "message_ids": ["1:1"]})
    assert r.status_code == 400, r.text
    for client in (broker, tc, pa):
        client.close()


def test_what_the_fuzzer_found_stays_fixed(suite: Suite) -> None:
    """What the fuzzer found: 500s (replication admin, directly and forwarded by the broker), a
    schema-valid request refused, a schema-invalid one accepted."""
    headers = {"authorization": f"Bearer {TOKEN}"}
    for url in (suite.replication.url, suite.broker.url):
        with httpx.Client(base_url=url, headers=headers, timeout=30) as c:
            for service_url in ("http://", "http://\ud96b\ude41\u00abCbx", "http://\u00e9t\u00e9"):
                # json.dumps escapes as \uXXXX, as the fuzzer sent it (raw surrogates are no UTF-8).
                r = c.put("/admin/v2/clusters/peer0", content=json.dumps({"service_url": service_url}),
                          headers={"content-type": "application/json"})
                assert r.status_code == 400 and r.json()["error"] == "malformed", (url, service_url, r.text)
            for path in ("/admin/v2/clusters/%1F%C2%AD%C3%8D", "/admin/v2/clusters/%F4%8A%AA%8A%06%2C"):
                r = c.get(path)
                assert r.status_code == 404 and r.json()["error"] == "not_found", (url, path, r.text)
                r = c.put(path, json={"service_url": "http://127.0.0.1:1"})
                assert r.status_code == 400 and r.json()["error"] == "malformed", (url, path, r.text)
    # A replicated topic's made-up name became a ledger file name too long (503), every call.
    with httpx.Client(base_url=suite.broker.url, headers=headers, timeout=30) as c:
        topic = "persistent://\u00f5:/" + "\U0003f000" * 90 + "/x"
        r = c.post("/v1/replication/topics", json={"topic": topic, "partitions": 1})
        assert r.status_code == 400 and r.json()["error"] == "malformed", r.text
        # ST202: a trim's position without its partition was refused (400); the id names its
        # partition (by its ledger id), as an ack's does: this one is of no partition of x.
        before = "18446744073701029897:18440751900259666294:8"
        r = c.post("/admin/v2/persistent/a/n/x/trim", json={"before": before})
        assert r.status_code == 404 and r.json()["error"] == "not_found", r.text
        # Issue 38: a subscription update to another partition's position was a 400; as the trim's, 404.
        r = c.post("/v1/replication/subscriptions/update", json={
            "topic": "persistent://a/n/x", "partition": 0, "subscription": "s", "position": before})
        assert r.status_code == 404 and r.json()["error"] == "not_found", r.text
        # A replicated marker with a number past 64 bits (schema-valid: any JSON number) was a 500.
        entry = {"position": "1:2", "marker": {"type": "fuzz", "n": -49373364500454540170791747584}}
        r = c.post("/v1/replication/write",
                   json={"topic": "persistent://a/n/x", "partition": 0, "source": "fuzz", "entries": [entry]})
        assert r.status_code == 200, r.text
        # ST201: a one-value query parameter given several times was answered for one of them.
        for path in ("/admin/v3/transactions/transactionBufferStats/a/n/x?partition=1&partition=0",
                     "/v1/topics/a/n/x/subscriptions/s/messages?wait_ms=0&max=1&max=2"):
            r = c.get(path)
            assert r.status_code == 400 and r.json()["error"] == "malformed", (path, r.text)


def api_error_shape(ctx: Any, response: Any, case: Any) -> bool | None:
    """Every 4xx/5xx body is ``{"error": code, "message": text}`` (docs/api.md)."""
    if response.status_code < 400:
        return None
    body = response.json()
    assert isinstance(body, dict) and set(body) == {"error", "message"}, response.text[:300]
    assert isinstance(body["error"], str) and isinstance(body["message"], str), response.text[:300]
    return True


#: Path parameters of things that exist (the fuzzer's own would mostly be 404s).
REAL = {"tenant": "a", "namespace": "n", "topic": "x", "sub": "s", "coordinator_id": "0"}


def strategy(operation: Any) -> st.SearchStrategy[schemathesis.Case]:
    """Valid and invalid requests, on made-up names and on the real topic and subscription."""
    real = {p.name: REAL[p.name] for p in operation.path_parameters if p.name in REAL}
    modes = [operation.as_strategy(GenerationMode.POSITIVE), operation.as_strategy(GenerationMode.NEGATIVE)]
    if real:
        modes += [operation.as_strategy(mode, path_parameters=real) for mode in GenerationMode]
    return st.one_of(modes)


#: A hunt's run time grows with its examples (the broker's 100 a run took 8 minutes: creating
#: 1024-partition topics is most of it); past pytest's 300 s the timeout fired inside whichever
#: operation ran then, and came out as that operation's flaky failure (POST /v1/replication/topics).
@pytest.mark.timeout(FUZZ_TIMEOUT_S)
@pytest.mark.parametrize("service", ORDER)
def test_fuzz_every_operation(suite: Suite, service: str) -> None:
    url = suite.procs[service].url
    schema = schemathesis.openapi.from_url(url + "/openapi.json")
    headers = {"authorization": f"Bearer {TOKEN}"}
    failures: list[str] = []
    operations, calls, left = 0, [], []
    # Our own deadline before the mark's: past it the cases left are no-ops and the run fails
    # naming what it did not fuzz (a timeout inside Hypothesis is a "failing example" it replays).
    deadline = time.monotonic() + 0.8 * FUZZ_TIMEOUT_S
    replay = ("replay: the same run (derandomized)" if FUZZ_SEED is None else
              f"replay: STREAMTX_FUZZ_RANDOM=1 STREAMTX_FUZZ_SEED={FUZZ_SEED} "
              f"STREAMTX_FUZZ_EXAMPLES={FUZZ_EXAMPLES}")
    replay += f" .venv/bin/python -m pytest tests/e2e/test_fuzz_openapi.py -k 'every_operation and {service}'"
    reseed = seed(FUZZ_SEED) if FUZZ_SEED is not None else (lambda f: f)
    failed: list[str] = []  # an operation's failing examples (request, traceback); the last: the shrunk one
    for result in schema.get_all_operations():
        operation = result.ok()
        operations += 1
        if time.monotonic() > deadline:
            left.append(operation.label)
            continue
        failed.clear()

        @reseed
        @settings(max_examples=FUZZ_EXAMPLES, deadline=None, database=None, derandomize=FUZZ_SEED is None,
                  suppress_health_check=list(HealthCheck))
        @given(case=strategy(operation))
        def fuzz(case: schemathesis.Case) -> None:
            if time.monotonic() > deadline:
                return
            try:
                check(case)
            except Exception:
                failed.append(f"example: {as_request(case, url)}\n{traceback.format_exc()[-2500:]}")
                raise

        def check(case: schemathesis.Case) -> None:
            # Long polls would only wait; the fuzzer wants answers.
            for part in (case.query, case.body):  # fetch's query, replication reads' body
                wait = part.get("wait_ms") if isinstance(part, dict) else None
                if isinstance(wait, int | str) and str(wait).lstrip("-").isdigit():
                    part["wait_ms"] = min(int(wait), 50)
            response = case.call(base_url=url, headers=headers, timeout=30)
            calls.append(response.status_code)
            # Every check schemathesis has (issue 21 item 13): undocumented statuses, headers and
            # content types, schema-valid requests refused, invalid ones accepted, 405 without Allow.
            case.validate_response(response, additional_checks=[api_error_shape], headers=headers,
                                   transport_kwargs={"base_url": url, "headers": headers, "timeout": 30})

        try:
            fuzz()
        except (Exception, BaseExceptionGroup) as exc:  # collected: a run reports every operation that fails
            # A group (Hypothesis's flaky failure) says what failed only in its members.
            # (Hypothesis wraps a schemathesis failure group: the group is the member's cause.)
            members = [e.__cause__ or e for e in getattr(exc, "exceptions", ())]
            if stop := next((e for e in members if not isinstance(e, Exception | BaseExceptionGroup)), None):
                raise stop from exc  # pytest's timeout, ^C: not the operation's failure
            text = "\n".join([str(exc), *(f"- {type(e).__name__}: {e}"[:1500] for e in members)])
            # The example and its traceback, or (a failure outside the call: generation, shrinking,
            # like the IndexError "pop from empty list" once kept alone) the run's own traceback.
            where = failed[-1] if failed else "".join(traceback.format_exception(exc))[-2500:]
            failures.append(f"{operation.label}: {text[:3000]}\n{where}\n{replay}")
    assert not left, (f"time budget ({0.8 * FUZZ_TIMEOUT_S:.0f} s of the {FUZZ_TIMEOUT_S} s timeout) spent: "
                      f"{len(left)} of {operations} operations not fuzzed: {left}\n{replay}")
    assert operations >= 5 and len(calls) >= operations * min(FUZZ_EXAMPLES, 5), (operations, len(calls))
    assert not failures, "\n\n".join(failures)


def as_request(case: schemathesis.Case, url: str) -> str:
    """The request a case sends, to replay by hand (as curl when schemathesis can say it)."""
    try:
        return str(case.as_curl_command(headers={"authorization": f"Bearer {TOKEN}"}))
    except Exception:  # an example curl cannot carry: the parts, as they are
        return f"{case.method} {url}{case.formatted_path} query={case.query!r} body={case.body!r}"


@pytest.mark.parametrize("service", ORDER)
def test_every_undocumented_method_is_a_405_naming_the_documented_ones(suite: Suite, service: str) -> None:
    """Issue 38: ``OPTIONS .../partitions`` answered ``allow: GET`` though PUT is documented too;
    schemathesis checks that a 405 has an ``Allow``, not what it says."""
    url = suite.procs[service].url
    doc = httpx.get(url + "/openapi.json").json()
    wrong = []
    with httpx.Client(base_url=url, headers={"authorization": f"Bearer {TOKEN}"}, timeout=30) as c:
        for template, ops in doc["paths"].items():
            documented = {m.upper() for m in ops}
            path = re.sub(r"\{([^}]+)\}", lambda m: REAL.get(m[1], "1:2" if m[1] == "txn_id" else "x"),
                          template)
            for method in sorted({"DELETE", "GET", "OPTIONS", "PATCH", "POST", "PUT"} - documented):
                r = c.request(method, path)
                allow = set(r.headers.get("allow", "").split(", ")) - {"HEAD", ""}
                if r.status_code != 405 or allow != documented or set(r.json()) != {"error", "message"}:
                    wrong.append(f"{method} {path}: {r.status_code} allow={r.headers.get('allow')!r}, "
                                 f"documented {sorted(documented)}")
    assert not wrong, "\n".join(wrong)
