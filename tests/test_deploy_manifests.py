"""deploy/*.yaml against the Kubernetes JSON schemas (kubernetes-validate ships them: nothing is downloaded), strict:
a misspelt field is an error, not silently dropped by the API server. And what several dashboard replicas need:
sticky sessions on the Ingress and the Service, websocket timeouts, one allowed host list matching the Ingress,
the sign-in cookie secret shared by every replica, a PodDisruptionBudget that lets a drain proceed."""

from __future__ import annotations

import kubernetes_validate
import pytest
import yaml

from tests.conftest import ROOT

DEPLOY = ROOT / "deploy"
# The oldest Kubernetes we support (CronJob timeZone is GA from 1.27) and the newest the schemas know.
VERSIONS = ("1.27.0", kubernetes_validate.latest_version())
CRDS = {"monitoring.coreos.com/v1"}  # prometheus-operator's PrometheusRule: tests/test_alert_rules.py checks it
LABELS = {"app.kubernetes.io/name": "agent-memory", "app.kubernetes.io/component": "dashboard"}


def documents() -> list[tuple[str, dict]]:
    return [
        (path.name, doc)
        for path in sorted(DEPLOY.glob("*.yaml"))
        for doc in yaml.safe_load_all(path.read_text())
        if doc
    ]


def dashboard(kind: str) -> dict:
    (doc,) = [d for name, d in documents() if name == "dashboard-deployment.yaml" and d["kind"] == kind]
    return doc


@pytest.mark.parametrize("version", VERSIONS)
def test_every_manifest_is_valid_for_kubernetes(version):
    checked = 0
    for name, doc in documents():
        if doc["apiVersion"] in CRDS:
            continue
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(f"{name}: {doc['kind']} {doc['metadata']['name']}: {exc.message} at {list(exc.path)}")
        checked += 1
    kinds = {doc["kind"] for _, doc in documents()}
    assert {"Deployment", "Service", "Ingress", "PodDisruptionBudget", "Job", "CronJob"} <= kinds
    assert checked >= 8


def test_the_schemas_catch_a_misspelt_field():
    service = {**dashboard("Service"), "spec": {**dashboard("Service")["spec"], "sesionAffinity": "ClientIP"}}
    with pytest.raises(kubernetes_validate.ValidationError, match="sesionAffinity"):
        kubernetes_validate.validate(service, VERSIONS[0], strict=True)


def test_each_browser_stays_on_one_replica():
    deployment, service, ingress = dashboard("Deployment"), dashboard("Service"), dashboard("Ingress")
    assert deployment["spec"]["replicas"] >= 2
    assert service["spec"]["sessionAffinity"] == "ClientIP"
    notes = ingress["metadata"]["annotations"]
    assert notes["nginx.ingress.kubernetes.io/affinity"] == "cookie"
    assert notes["nginx.ingress.kubernetes.io/affinity-mode"] == "persistent"
    assert notes["nginx.ingress.kubernetes.io/session-cookie-name"]
    # an open page's websocket idles between reruns: nginx's 60 s default would cut it every minute
    for timeout in ("proxy-read-timeout", "proxy-send-timeout"):
        assert int(notes[f"nginx.ingress.kubernetes.io/{timeout}"]) >= 3600
    (rule,) = ingress["spec"]["rules"]
    (path,) = rule["http"]["paths"]
    assert path["backend"]["service"]["name"] == service["metadata"]["name"]
    assert path["backend"]["service"]["port"]["name"] in {p["name"] for p in service["spec"]["ports"]}
    assert service["spec"]["selector"] == deployment["spec"]["template"]["metadata"]["labels"] == LABELS


def test_the_ingress_host_is_the_one_allowed_host():
    (container,) = dashboard("Deployment")["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    allowed = set(env["STREAMLIT_SERVER_ALLOWED_HOSTS"].split())
    ingress = dashboard("Ingress")
    hosts = {rule["host"] for rule in ingress["spec"]["rules"]}
    assert hosts == allowed
    assert hosts <= {h for tls in ingress["spec"]["tls"] for h in tls["hosts"]}


def test_every_replica_reads_the_same_sign_in_secret():
    """st.login signs its cookie with [auth] cookie_secret: it comes from one Secret mounted in every pod, never
    from something per pod (an emptyDir, a generated file), or each replica would reject the others' users."""
    pod = dashboard("Deployment")["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    (mount,) = [m for m in container["volumeMounts"] if m["mountPath"].endswith("/.streamlit/secrets.toml")]
    assert mount["mountPath"] == "/app/.streamlit/secrets.toml"  # the image's WORKDIR is /app
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    assert set(volume) == {"name", "secret"} and volume["secret"]["secretName"]
    assert "WORKDIR /app" in (ROOT / "Dockerfile").read_text()


def test_a_drain_keeps_a_replica_serving():
    deployment, pdb = dashboard("Deployment"), dashboard("PodDisruptionBudget")
    assert pdb["spec"]["selector"]["matchLabels"] == LABELS
    replicas = deployment["spec"]["replicas"]
    if "maxUnavailable" in pdb["spec"]:
        assert 1 <= pdb["spec"]["maxUnavailable"] < replicas
    else:
        assert 1 <= pdb["spec"]["minAvailable"] < replicas  # == replicas would block every drain
    assert deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
