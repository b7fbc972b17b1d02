"""The topic lookup applies the tenant policy (issue 32 defect 12): a real broker, auth on.

Before, a client of tenant ``a`` learned through ``/lookup/v2/topic/...`` which topics tenant ``b``
has and how many partitions each (200 for a partition that exists, 404 past the last), while
``GET /admin/v2/persistent/b/.../partitions`` answered it 403.
"""

from __future__ import annotations

from streamtx.auth import issue
from tests.integration.broker.conftest import BrokerFactory

SECRET = "lookup-secret-lookup-secret-lookup-secret"
CLIENT_A = issue(SECRET, subject="app-a", roles=["client"], tenants=["a"])
CLIENT_B = issue(SECRET, subject="app-b", roles=["client"], tenants=["b"])
SERVICE = issue(SECRET, subject="svc", roles=["service"])
ADMIN = issue(SECRET, subject="ops", roles=["admin"])


def test_a_client_looks_up_only_its_tenants_topics(broker_factory: BrokerFactory) -> None:
    b = broker_factory(auth_jwt_secret=SECRET, service_token=SERVICE)

    def get(path: str, token: str) -> tuple[int, str]:
        r = b.http.get(path, headers={"authorization": f"Bearer {token}"})
        return r.status_code, r.json().get("error", "")

    assert b.http.put("/admin/v2/persistent/b/n/secret/partitions", json={"partitions": 2},
                      headers={"authorization": f"Bearer {ADMIN}"}).is_success
    paths = ["/lookup/v2/topic/persistent/b/n/secret", "/lookup/v2/topic/persistent/b/n/secret-partition-1",
             "/lookup/v2/topic/persistent/b/n/secret-partition-2",  # past the last: was a 404
             "/lookup/v2/topic/persistent/b/n/absent", "/admin/v2/persistent/b/n/secret/partitions"]
    for path in paths:
        assert get(path, CLIENT_A) == (403, "forbidden"), path
    assert get(paths[1], CLIENT_B)[0] == 200
    assert get(paths[2], CLIENT_B)[0] == 404
    assert get(paths[1], SERVICE)[0] == 200
