"""Bodies of the replication admin API (Pulsar's paths), served by the controller and forwarded
by the broker: one definition, so both validate and document the same (docs/api.md)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Body
from pydantic import Field, StringConstraints

from streamtx.contracts.body import StrictBody
from streamtx.names import NAME_PATTERN

ClusterName = Annotated[str, StringConstraints(pattern=NAME_PATTERN)]


class ClustersBody(StrictBody):
    """``{"clusters": [...]}``, accepted beside Pulsar's bare list."""

    clusters: list[ClusterName]


#: A replication list: Pulsar's bare JSON list (``{"clusters": [...]}`` is accepted too).
ClusterList = Annotated[list[ClusterName] | ClustersBody, Body()]


#: A cluster's service URL: http(s)://host[:port 1-65535][/path], printable ASCII, no ``user:pass@``
#: (the controller sends the service token there: a secret in the URL would be stored and logged),
#: no query or fragment. One regex, in the OpenAPI document too, so what the schema allows is stored.
_port = r"(?:[1-9][0-9]{0,3}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5])"
_h4 = "[0-9A-Fa-f]{1,4}"
_ipv6 = "|".join([f"(?:{_h4}:){{7}}{_h4}", f"(?:{_h4}:){{1,7}}:", f"(?:{_h4}:){{1,6}}:{_h4}",
                  *(f"(?:{_h4}:){{1,{6 - k}}}(?::{_h4}){{1,{k + 1}}}" for k in range(1, 6)),
                  f":(?:(?::{_h4}){{1,7}}|:)"])
_host = rf"(?:[A-Za-z0-9][A-Za-z0-9.-]*|\[(?:{_ipv6})\])"
SERVICE_URL_PATTERN = rf"^https?://{_host}(?::{_port})?(?:/[!-\"$->A-~]*)?$"


class ClusterData(StrictBody):
    """A peer cluster: any service URL of it (its ``/v1/cluster`` lists the others)."""

    # The fuzzer's finds: "http://" alone was stored as "http:" and broke every later read;
    # non-ASCII was an invalid URL to httpx, a 500; a port of 99999 and user:pass@ were stored.
    service_url: str = Field(min_length=1, max_length=2048, pattern=SERVICE_URL_PATTERN)
