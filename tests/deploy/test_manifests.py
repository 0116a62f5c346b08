"""deploy/kubernetes/: every overlay renders with the real ``kubectl kustomize``, every object
validates against the Kubernetes schemas (kubernetes-validate, strict), the pods are locked
down as the README says, the Ingress sends the node agents' endpoints to pods of their own
and everything else to the web pods, and what the local stand-in serves is applied to it with
the real kubectl."""

from __future__ import annotations

import ipaddress
import json
import re
import urllib.error
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from urllib.parse import urlsplit

import kubernetes_validate
import pytest
import yaml
from django.urls import URLResolver, get_resolver, resolve
from django.urls.exceptions import Resolver404
from django.urls.resolvers import RoutePattern

from devcluster.runner import Handle
from gpu_agent.agent_api import views as agent_views
from gpu_agent.agent_api.parsers import MAX_BODY_BYTES
from gpu_agent.agent_api.views import AgentView
from gpu_node_agent import runner
from portal import views
from tests.deploy.manifests import (
    KUBERNETES_VERSIONS,
    Obj,
    discovery,
    dockerfile_user,
    examples,
    find,
    ingress_backend,
    kubectl,
    kustomizations,
    overlay,
    overlay_id,
    pod_spec,
    render,
    selected,
    workloads,
)

OVERLAYS = kustomizations()
GPU_OPERATOR_NAMESPACE = "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: gpu-operator\n"
PORTAL_COMPONENTS = {"web", "agent-api", "worker", "beat", "migrate"}


def test_the_overlays_are_the_ones_the_readme_names():
    assert [overlay_id(p) for p in OVERLAYS] == [
        "in-cluster",
        "outside",
        "outside/managed-cluster",
    ]


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
@pytest.mark.parametrize("path", OVERLAYS, ids=overlay_id)
def test_every_rendered_object_validates(path: Path, version: str):
    objects = render(path)
    assert objects
    problems = []
    for obj in [*objects, *examples()]:
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.ValidationError as error:
            problems.append(f"{obj['kind']} {obj['metadata']['name']}: {error.message}")
    assert problems == []


def test_a_misspelt_field_fails_the_validation():
    """The strict check the test above relies on catches what kubectl kustomize lets through."""
    web = json.loads(json.dumps(find(overlay("in-cluster"), "Deployment", "portal-web")))
    web["spec"]["template"]["spec"]["containers"][0]["securityContext"]["readOnlyRootFilesytem"] = (
        True
    )
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(web, KUBERNETES_VERSIONS[0], strict=True)


def _portal_workloads(objects: tuple[Obj, ...]) -> list[Obj]:
    return [
        o
        for o in workloads(objects)
        if o["metadata"]["labels"].get("app.kubernetes.io/name") == "gpu-quota-portal"
    ]


@pytest.mark.parametrize("name", ["in-cluster", "outside"])
def test_portal_pods_run_as_the_image_user_without_privileges(name: str):
    uid, gid = dockerfile_user()
    found = set()
    for obj in _portal_workloads(overlay(name)):
        found.add(obj["metadata"]["labels"]["app.kubernetes.io/component"])
        spec = pod_spec(obj)
        pod = spec["securityContext"]
        assert pod["runAsNonRoot"] is True
        assert (pod["runAsUser"], pod["runAsGroup"]) == (uid, gid)
        assert pod["seccompProfile"] == {"type": "RuntimeDefault"}
        mounts_needed = {"/tmp", "/data"}  # noqa: S108 - paths inside the pod, not files here
        for container in [*spec.get("initContainers", []), *spec["containers"]]:
            where = f"{obj['metadata']['name']}/{container['name']}"
            context = container["securityContext"]
            assert context["allowPrivilegeEscalation"] is False, where
            assert context["readOnlyRootFilesystem"] is True, where
            assert context["capabilities"] == {"drop": ["ALL"]}, where
            assert "privileged" not in context, where
            resources = container["resources"]
            assert {"cpu", "memory"} <= set(resources["requests"]), where
            assert {"cpu", "memory"} <= set(resources["limits"]), where
            # What writes (temporary files, DATA_DIR: beat's schedule) is an emptyDir.
            mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
            volumes = {v["name"]: v for v in spec["volumes"]}
            for path in mounts_needed:
                assert "emptyDir" in volumes[mounts[path]], f"{where}: {path}"
    assert found == PORTAL_COMPONENTS


def test_the_writable_paths_are_the_ones_the_settings_write_to():
    config = find(overlay("in-cluster"), "ConfigMap", "portal-config")["data"]
    assert config["DATA_DIR"] == "/data"
    beat = find(overlay("in-cluster"), "Deployment", "portal-beat")
    assert "--schedule=/data/celerybeat-schedule" in pod_spec(beat)["containers"][0]["command"]
    web = pod_spec(find(overlay("in-cluster"), "Deployment", "portal-web"))["containers"][0]
    # gunicorn's heartbeat files go to a memory-backed emptyDir, not the read-only root.
    assert "--worker-tmp-dir=/dev/shm" in web["command"]
    assert "/dev/shm" in {m["mountPath"] for m in web["volumeMounts"]}  # noqa: S108 - a path inside the pod


def test_every_overlay_runs_the_production_settings():
    for name in ("in-cluster", "outside"):
        config = find(overlay(name), "ConfigMap", "portal-config")["data"]
        assert config["DJANGO_SETTINGS_MODULE"] == "portal.settings.production", name


def test_beat_is_exactly_one_and_never_two_during_an_upgrade():
    for name in ("in-cluster", "outside"):
        beat = find(overlay(name), "Deployment", "portal-beat")
        assert beat["spec"]["replicas"] == 1
        assert beat["spec"]["strategy"] == {"type": "Recreate"}


# Alive is the process alone (a database or Redis outage must not restart every pod); started
# and ready is everything a request needs (portal/health.py).
PROBE_VIEWS = {"startupProbe": "readyz", "readinessProbe": "readyz", "livenessProbe": "livez"}


@pytest.mark.django_db
@pytest.mark.parametrize("deployment", ["portal-web", "portal-agent-api"])
def test_the_probes_reach_livez_and_readyz_through_the_host_check(client, settings, deployment: str):  # fmt: skip
    """The kubelet's probe, as the manifests write it, answers 200 from the portal configured
    as the ConfigMap says (DEBUG off: Django refuses a Host not in ALLOWED_HOSTS)."""
    objects = overlay("in-cluster")
    config = find(objects, "ConfigMap", "portal-config")["data"]
    container = pod_spec(find(objects, "Deployment", deployment))["containers"][0]
    port_names = {p["name"]: p["containerPort"] for p in container["ports"]}
    settings.DEBUG = False
    settings.ALLOWED_HOSTS = config["ALLOWED_HOSTS"].split(",")
    settings.SECURE_SSL_REDIRECT = True  # on in production: the probes speak plain HTTP
    for probe, view in PROBE_VIEWS.items():
        http = container[probe]["httpGet"]
        assert port_names[http["port"]] == 8000
        assert http["path"] == f"/{view}", probe
        assert resolve(http["path"]).func is getattr(views, view)
        headers = {h["name"]: h["value"] for h in http.get("httpHeaders", [])}
        answer = client.get(http["path"], HTTP_HOST=f"{headers['Host']}:8000")
        assert answer.status_code == 200, (probe, answer.content)
        assert answer.json()["status"] == "ok"
    # Without the header the pod's own address is the Host: refused.
    for path in ("/livez", "/readyz", "/healthz"):
        assert client.get(path, HTTP_HOST="10.1.2.3:8000").status_code == 400
    # Plain HTTP elsewhere is redirected: the probes pass because their paths are exempt.
    assert client.get("/accounts/login/", HTTP_HOST="localhost:8000").status_code == 301
    # /healthz (the database alone) still answers for what already asks it.
    assert client.get("/healthz", HTTP_HOST="localhost:8000").json() == {"status": "ok"}


def test_the_init_containers_wait_only_for_migrations():
    """No shell loop that retries anything: the command waits for pending migrations and
    ends with the reason on anything else (tests/portal/test_health.py)."""
    waiting = set()
    for obj in _portal_workloads(overlay("in-cluster")):
        for container in pod_spec(obj).get("initContainers", []):
            if container["name"] == "wait-for-migrations":
                assert container["command"] == ["python", "manage.py", "wait_for_migrations"]
                waiting.add(obj["metadata"]["name"])
    assert {"portal-web", "portal-agent-api", "portal-worker", "portal-beat"} <= waiting


def test_secrets_come_from_files_of_the_example_secret():
    secret = next(o for o in examples() if o["metadata"]["name"] == "portal-secrets")
    keys = set(secret["stringData"])
    for obj in _portal_workloads(overlay("in-cluster")):
        spec = pod_spec(obj)
        volumes = {v["name"]: v for v in spec["volumes"]}
        for container in [*spec.get("initContainers", []), *spec["containers"]]:
            env = {e["name"]: e.get("value") for e in container["env"]}
            assert {"DATABASE_URL_FILE", "REDIS_URL_FILE", "SECRET_KEY_FILE"} <= set(env)
            assert not {"DATABASE_URL", "REDIS_URL", "SECRET_KEY"} & set(env)
            mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
            for name, value in env.items():
                if not name.endswith("_FILE"):
                    continue
                path = Path(value)
                volume = volumes[mounts[str(path.parent)]]
                assert volume["secret"]["secretName"] == "portal-secrets"
                assert path.name in keys


def test_the_settings_read_each_secret_file(tmp_path, monkeypatch):
    """core.env reads NAME_FILE before NAME: what the manifests rely on."""
    from core.env import env_str

    (tmp_path / "database-url").write_text("postgres://portal:s3cret@db:5432/portal\n")
    monkeypatch.setenv("DATABASE_URL_FILE", str(tmp_path / "database-url"))
    monkeypatch.setenv("DATABASE_URL", "postgres://wrong")
    assert env_str("DATABASE_URL") == "postgres://portal:s3cret@db:5432/portal"


def _automount(obj: Obj) -> bool:
    return bool(pod_spec(obj).get("automountServiceAccountToken", True))


def _bound_roles(objects: tuple[Obj, ...], account: str, namespace: str) -> set[tuple[str, str]]:
    """(kind, name) of every role the manifests bind to ``account``."""
    return {
        (o["roleRef"]["kind"], o["roleRef"]["name"])
        for o in objects
        if o["kind"] in {"RoleBinding", "ClusterRoleBinding"}
        and {"kind": "ServiceAccount", "name": account, "namespace": namespace} in o["subjects"]
    }


PORTAL_ROLES = {
    ("ClusterRole", "gpu-quota-portal"),
    ("Role", "gpu-quota-portal-gpu-operator"),
    ("Role", "gpu-quota-portal-impersonate-binder"),
}
# The web pods' account also reviews in-cluster agents' tokens (cluster-access/node-join.yaml).
WEB_ROLES = {("ClusterRole", "gpu-quota-portal-web"), ("ClusterRole", "gpu-quota-portal-node-join")}


def test_in_cluster_the_worker_carries_the_portal_token_and_web_a_read_only_one():
    """The internet-facing web pods never hold the portal's account: their own lists
    ResourceQuotas and ClusterQueues and nothing else (tests/deploy/test_rbac.py)."""
    objects = overlay("in-cluster")
    mounted = {
        o["metadata"]["labels"]["app.kubernetes.io/component"]: pod_spec(o)["serviceAccountName"]
        for o in _portal_workloads(objects)
        if _automount(o)
    }
    assert mounted == {
        "worker": "gpu-quota-portal",
        "web": "gpu-quota-portal-web",
        # an in-cluster agent's join: a TokenReview and a read of its pod, as the web account
        "agent-api": "gpu-quota-portal-web",
    }
    namespace = find(objects, "Deployment", "portal-web")["metadata"]["namespace"]
    for account in mounted.values():
        find(objects, "ServiceAccount", account)
    assert _bound_roles(objects, "gpu-quota-portal", namespace) == PORTAL_ROLES
    assert _bound_roles(objects, "gpu-quota-portal-web", namespace) == WEB_ROLES


def _kubeconfigs_secret(spec: Obj) -> str:
    [volume] = [v for v in spec["volumes"] if v["name"] == "kubeconfigs"]
    [mount] = [m for m in spec["containers"][0]["volumeMounts"] if m["name"] == "kubeconfigs"]
    assert (mount["mountPath"], mount["readOnly"]) == ("/kubeconfigs", True)
    return str(volume["secret"]["secretName"])


def test_outside_mounts_the_kubeconfigs_and_binds_nothing_in_its_own_cluster():
    objects = overlay("outside")
    assert not [o for o in objects if o["kind"] in {"ClusterRole", "ClusterRoleBinding"}]
    assert not [o for o in _portal_workloads(objects) if _automount(o)]
    # The worker the portal's kubeconfigs, the web pods the read-only ones (same keys, same path).
    assert _kubeconfigs_secret(pod_spec(find(objects, "Deployment", "portal-worker"))) == (
        "portal-kubeconfigs"
    )
    assert _kubeconfigs_secret(pod_spec(find(objects, "Deployment", "portal-web"))) == (
        "portal-kubeconfigs-web"
    )
    kubeconfigs = {o["metadata"]["name"]: o for o in examples() if o["kind"] == "Secret"}
    assert set(kubeconfigs["portal-kubeconfigs"]["stringData"]) == set(
        kubeconfigs["portal-kubeconfigs-web"]["stringData"]
    )
    # The agents' endpoints ask a cluster only to verify an in-cluster agent's token: the web
    # pods' read-only kubeconfigs.
    assert _kubeconfigs_secret(pod_spec(find(objects, "Deployment", "portal-agent-api"))) == (
        "portal-kubeconfigs-web"
    )
    # The managed cluster gets the identities the kubeconfigs' tokens belong to, each bound
    # to its own roles.
    managed = overlay("outside/managed-cluster")
    for token_name, roles in (
        ("gpu-quota-portal-token", PORTAL_ROLES),
        ("gpu-quota-portal-web-token", WEB_ROLES),
    ):
        token = find(managed, "Secret", token_name)
        assert token["type"] == "kubernetes.io/service-account-token"
        account = token["metadata"]["annotations"]["kubernetes.io/service-account.name"]
        find(managed, "ServiceAccount", account)
        assert _bound_roles(managed, account, token["metadata"]["namespace"]) == roles
    assert not [o for o in managed if o["kind"] in {"Deployment", "Job"}]


def _pods_selected(policy: Obj, objects: tuple[Obj, ...]) -> set[str]:
    wanted = policy["spec"]["podSelector"]["matchLabels"]
    return {
        o["metadata"]["name"]
        for o in _portal_workloads(objects)
        if wanted.items() <= o["spec"]["template"]["metadata"]["labels"].items()
    }


@pytest.mark.parametrize("name", ["in-cluster", "outside"])
def test_the_network_policy_holds_the_portal_to_its_own_traffic(name: str):
    objects = overlay(name)
    policy = find(objects, "NetworkPolicy", "portal")
    assert _pods_selected(policy, objects) == {
        "portal-web",
        "portal-agent-api",
        "portal-worker",
        "portal-beat",
        "portal-migrate",
    }
    assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
    [ingress] = policy["spec"]["ingress"]
    assert ingress["ports"] == [{"protocol": "TCP", "port": 8000}]
    sources = {
        s["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"]
        for s in ingress["from"]
    }
    assert sources == {"ingress-nginx", "monitoring"}
    ports = {(p["protocol"], p["port"]) for rule in policy["spec"]["egress"] for p in rule["ports"]}
    assert {("UDP", 53), ("TCP", 53), ("TCP", 5432), ("TCP", 6379), ("TCP", 6443)} <= ports
    # HTTPS to the internet (webhooks) never reaches a private network.
    for rule in policy["spec"]["egress"]:
        for peer in rule.get("to", []):
            block = peer.get("ipBlock")
            if block and block["cidr"] == "0.0.0.0/0":
                excluded = [ipaddress.ip_network(c) for c in block["except"]]
                for private in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "169.254.0.0/16"):
                    assert ipaddress.ip_network(private) in excluded


# --- the stand-in ------------------------------------------------------------------------------


def _group(obj: Obj) -> str:
    return str(obj["apiVersion"]).rpartition("/")[0]


@pytest.mark.parametrize("path", OVERLAYS, ids=overlay_id)
def test_what_the_stand_in_serves_applies_to_it_with_kubectl(standin_server: Handle, path: Path):
    standin_server.reset()
    served = set(discovery(standin_server))
    # The GPU Operator's namespace exists where the agent's Role goes (its install made it).
    kubectl(standin_server, "apply", "-f", "-", stdin=GPU_OPERATOR_NAMESPACE)
    objects = [*examples(), *render(path)]
    applied = [o for o in objects if (_group(o), o["kind"]) in served]
    skipped = {o["kind"] for o in objects} - {o["kind"] for o in applied}
    # Not served by the stand-in (validated above instead): nothing else is left out.
    assert skipped <= {"DaemonSet", "Service", "Ingress", "PodDisruptionBudget"}
    # Namespaces first, as kubectl would need them.
    applied.sort(key=lambda o: o["kind"] != "Namespace")
    text = yaml.safe_dump_all(applied)
    done = kubectl(standin_server, "apply", "-f", "-", stdin=text)
    assert done.returncode == 0, done.stderr
    for obj in applied:
        where = ["-n", obj["metadata"]["namespace"]] if obj["metadata"].get("namespace") else []
        kind = obj["kind"].lower() + ("." + _group(obj) if _group(obj) else "")
        got = kubectl(standin_server, "get", kind, obj["metadata"]["name"], *where, "-o", "json")
        assert got.returncode == 0, got.stderr
        live: dict[str, Any] = json.loads(got.stdout)
        # What the manifest says is what the server holds (it may add its own labels).
        assert (
            obj["metadata"].get("labels", {}).items() <= live["metadata"].get("labels", {}).items()
        )
        if obj["kind"] in {"Deployment", "Job"}:
            assert live["spec"]["template"] == obj["spec"]["template"]


@pytest.mark.parametrize("name", ["in-cluster", "outside"])
def test_the_upgrade_selector_picks_the_migration_job_alone(name: str):
    """docs/operations.md applies ``-l app.kubernetes.io/component=migrate`` first."""
    picked = [
        (o["kind"], o["metadata"]["name"])
        for o in overlay(name)
        if (o["metadata"].get("labels") or {}).get("app.kubernetes.io/component") == "migrate"
    ]
    assert picked == [("Job", "portal-migrate")]


# Secrets the operator creates by hand, each with its command in the manifests and the README:
# the example files show the portal's; the TLS certificate and the agents' join tokens are
# the ingress's and the agents' own.
CREATED_BY_HAND = {"portal-tls", "gpu-agent-join-tokens"}


@pytest.mark.parametrize("path", OVERLAYS, ids=overlay_id)
def test_every_config_map_and_secret_a_pod_needs_is_rendered_or_has_an_example(path: Path):
    objects = render(path)
    config_maps = {o["metadata"]["name"] for o in objects if o["kind"] == "ConfigMap"}
    secrets = {o["metadata"]["name"] for o in [*objects, *examples()] if o["kind"] == "Secret"}
    for obj in workloads(objects):
        spec = pod_spec(obj)
        for volume in spec.get("volumes", []):
            if "secret" in volume:
                assert volume["secret"]["secretName"] in secrets | CREATED_BY_HAND
        for container in [*spec.get("initContainers", []), *spec["containers"]]:
            for source in container.get("envFrom", []):
                assert source["configMapRef"]["name"] in config_maps
    for ingress in (o for o in objects if o["kind"] == "Ingress"):
        assert {t["secretName"] for t in ingress["spec"]["tls"]} <= CREATED_BY_HAND


def test_the_kubeconfig_example_is_one_the_kubernetes_client_loads(tmp_path: Path):
    """What a cluster's kubeconfig path points at in the outside overlay."""
    from kubernetes import client, config

    for name in ("portal-kubeconfigs", "portal-kubeconfigs-web"):
        secret = next(o for o in examples() if o["metadata"]["name"] == name)
        [(key, text)] = secret["stringData"].items()
        (tmp_path / key).write_text(text)
        configuration = client.Configuration()
        config.load_kube_config(config_file=str(tmp_path / key), client_configuration=configuration)
        assert configuration.host == "https://gpu-east.example.org:6443"


# --- the agents' endpoints on pods of their own -------------------------------------------------


def _component(obj: Obj) -> str:
    return str(obj["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/component"])


def _serving(objects: tuple[Obj, ...], backend: Obj) -> tuple[Obj, Obj]:
    """The Deployment and container port behind an Ingress backend: the Service it names, that
    Service's port, the one workload the Service selects and the port its targetPort names."""
    service = find(objects, "Service", backend["service"]["name"])
    [port] = [
        p for p in service["spec"]["ports"] if p["name"] == backend["service"]["port"]["name"]
    ]
    [deployment] = selected(service["spec"]["selector"], objects)
    [container] = pod_spec(deployment)["containers"]
    [target] = [p for p in container["ports"] if p["name"] == port["targetPort"]]
    return deployment, target


def _example(pattern: Any) -> str:
    """A path ``pattern`` matches: its converters and groups filled with sample values."""
    if isinstance(pattern, RoutePattern):
        return re.sub(r"<(?:(\w+):)?\w+>", lambda m: "1" if m[1] == "int" else "x1", str(pattern))
    text = re.sub(r"\(\?P<\w+>[^)]*\)", "1", pattern.regex.pattern)
    return text.removeprefix("^").removesuffix("$").replace("\\.", ".").replace("/?", "/")


def _routes() -> list[tuple[str, Any]]:
    """Every route of the portal's URLconf as (a path it answers, its view class), for the
    routes an example path really reaches (not one a converter refuses or an earlier route
    takes)."""
    found: list[tuple[str, Any]] = []

    def walk(patterns: list[Any], prefix: str) -> None:
        for entry in patterns:
            path = prefix + _example(entry.pattern)
            if isinstance(entry, URLResolver):
                walk(entry.url_patterns, path)
                continue
            try:
                reached = resolve("/" + path).func is entry.callback
            except Resolver404:
                reached = False
            if reached:
                view = getattr(entry.callback, "cls", None) or getattr(
                    entry.callback, "view_class", None
                )
                found.append(("/" + path, view))

    walk(get_resolver().url_patterns, "")
    return found


def _is_agents(view: Any) -> bool:
    return isinstance(view, type) and issubclass(view, AgentView)


@pytest.mark.parametrize("name", ["in-cluster", "outside"])
def test_the_ingress_sends_the_agents_endpoints_and_nothing_else_to_the_agent_api(name: str):
    """Every route of the portal, through the Ingress's path rules, its Service and the pods
    that Service selects: the node agents' endpoints land on the agent-api pods, every page and
    the rest of the API on the web pods, each on the port gunicorn binds."""
    objects = overlay(name)
    ingress = find(objects, "Ingress", "portal-web")
    [rule] = ingress["spec"]["rules"]
    routes = _routes()
    everyone = {c for c in vars(agent_views).values() if _is_agents(c) and c is not AgentView}
    assert everyone and {view for _, view in routes if _is_agents(view)} == everyone
    landed: dict[str, set[str]] = {"agent-api": set(), "web": set()}
    for path, view in routes:
        deployment, port = _serving(objects, ingress_backend(ingress, rule["host"], path))
        assert _component(deployment) == ("agent-api" if _is_agents(view) else "web"), path
        command = pod_spec(deployment)["containers"][0]["command"]
        assert f"--bind=0.0.0.0:{port['containerPort']}" in command, path
        landed[_component(deployment)].add(path)
    # The admins' fleet endpoints share the agents' URL module and stay with people's traffic.
    assert "/api/v1/nodes/" in landed["web"]
    assert "/api/v1/agent/report/" in landed["agent-api"]
    assert len(landed["web"]) > 50


@pytest.mark.parametrize(
    ("agents", "portal"), [("in-cluster", "in-cluster"), ("outside/managed-cluster", "outside")]
)
def test_the_agent_keeps_the_portal_url_and_its_requests_reach_the_agent_api(
    monkeypatch: pytest.MonkeyPatch, agents: str, portal: str
):
    """The agent's own client, pointed where the DaemonSet points it, asks for every endpoint
    it uses: each request goes to the portal's URL (the Ingress's TLS host) and from there to
    the agent-api pods, to a view of the agents."""
    objects = overlay(portal)
    agent = pod_spec(find(overlay(agents), "DaemonSet", "gpu-agent"))["containers"][0]
    url = next(a.removeprefix("--portal=") for a in agent["args"] if a.startswith("--portal="))
    assert url == find(objects, "ConfigMap", "portal-config")["data"]["PORTAL_URL"]
    ingress = find(objects, "Ingress", "portal-web")
    host = urlsplit(url).hostname
    assert [host] in [t["hosts"] for t in ingress["spec"]["tls"]]
    sent: list[str] = []

    def urlopen(request: Any, **_: Any) -> Any:
        sent.append(request.full_url)
        raise urllib.error.URLError("not sent")

    monkeypatch.setattr(runner.urllib.request, "urlopen", urlopen)
    client = runner.PortalClient(url, token="node-token")
    outcome: Any = SimpleNamespace(to_json=dict)
    calls = [
        lambda: client.register("join-token", "gpu-node-1"),
        lambda: client.report(
            {"node": "gpu-node-1", "sent_at": "2026-12-07T12:00:00Z", "gpus": []}
        ),
        client.desired,
        lambda: client.result(outcome),
        client.probes,
        lambda: client.probe_result(1, outcome),
    ]
    for call in calls:
        with pytest.raises(runner.PortalUnavailable):
            call()
    assert len(sent) == len(calls)
    for full_url in sent:
        parts = urlsplit(full_url)
        assert (parts.scheme, parts.hostname) == ("https", host)
        deployment, _ = _serving(objects, ingress_backend(ingress, host, parts.path))
        assert deployment["metadata"]["name"] == "portal-agent-api", parts.path
        assert _is_agents(resolve(parts.path).func.view_class), parts.path


@pytest.mark.parametrize("name", ["in-cluster", "outside"])
def test_the_agent_api_runs_the_web_app_as_the_web_pods_do(name: str):
    """The same image, settings, secrets, init container, probes, lock-down and cluster access
    (an in-cluster agent's join asks the cluster's TokenReview as the web account) as the web
    pods; only the pool's size differs."""
    objects = overlay(name)
    web = pod_spec(find(objects, "Deployment", "portal-web"))
    api = pod_spec(find(objects, "Deployment", "portal-agent-api"))
    assert api["initContainers"] == web["initContainers"]
    assert api["securityContext"] == web["securityContext"]
    assert api["serviceAccountName"] == web["serviceAccountName"]
    assert api["automountServiceAccountToken"] == web["automountServiceAccountToken"]
    [web_container] = web["containers"]
    [api_container] = api["containers"]
    for key in ("image", "env", "envFrom", "ports", "securityContext"):
        assert api_container[key] == web_container[key], key
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert api_container[probe] == web_container[probe], probe

    def server(container: Obj) -> dict[str, str]:
        """gunicorn's options but the pool's size (workers, threads)."""
        options = {a.split("=")[0]: a for a in container["command"][2:]}
        return {k: v for k, v in options.items() if k not in {"--workers", "--threads"}}

    assert (
        api_container["command"][:2] == web_container["command"][:2] == ["gunicorn", "portal.wsgi"]
    )
    assert server(api_container) == server(web_container)
    assert "--worker-class=gthread" in api_container["command"]
    # The same mounts of the same volumes, the read-only kubeconfigs included (outside).
    assert api_container["volumeMounts"] == web_container["volumeMounts"]
    web_volumes = {v["name"]: v for v in web["volumes"]}
    assert api["volumes"] == [web_volumes[v["name"]] for v in api["volumes"]]


@pytest.mark.parametrize("name", ["in-cluster", "outside"])
@pytest.mark.parametrize("deployment", ["portal-web", "portal-agent-api"])
def test_each_service_and_disruption_budget_selects_its_own_pods_only(name: str, deployment: str):
    """The bulkhead: web and agent-api pods never stand in for each other (no selector picks
    both), and a drain keeps one of each serving."""
    objects = overlay(name)
    found = find(objects, "Deployment", deployment)
    assert selected(found["spec"]["selector"]["matchLabels"], objects) == [found]
    service = find(objects, "Service", deployment)
    assert selected(service["spec"]["selector"], objects) == [found]
    [container] = pod_spec(found)["containers"]
    [port] = service["spec"]["ports"]
    assert port["targetPort"] in {p["name"] for p in container["ports"]}
    budget = find(objects, "PodDisruptionBudget", deployment)
    assert selected(budget["spec"]["selector"]["matchLabels"], objects) == [found]
    assert budget["spec"]["minAvailable"] < found["spec"]["replicas"]


@pytest.mark.parametrize("name", ["in-cluster", "outside"])
def test_the_agent_api_pods_have_the_web_pods_network_policy(name: str):
    """The ingress controller reaches the agent-api pods on the port their Service targets, and
    they may reach what the web pods may (PostgreSQL, Redis, DNS): the same policies select both."""
    objects = overlay(name)
    policies = [o for o in objects if o["kind"] == "NetworkPolicy"]

    def policies_of(deployment: Obj) -> list[Obj]:
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        return [
            p for p in policies if p["spec"]["podSelector"]["matchLabels"].items() <= labels.items()
        ]

    api = find(objects, "Deployment", "portal-agent-api")
    assert policies_of(api) == policies_of(find(objects, "Deployment", "portal-web"))
    service = find(objects, "Service", "portal-agent-api")
    [port] = service["spec"]["ports"]
    [container] = pod_spec(api)["containers"]
    http = next(p["containerPort"] for p in container["ports"] if p["name"] == port["targetPort"])
    admitted = [
        rule
        for policy in policies_of(api)
        for rule in policy["spec"].get("ingress", [])
        if {"protocol": "TCP", "port": http} in rule["ports"]
        and any(
            s.get("namespaceSelector", {}).get("matchLabels")
            == {"kubernetes.io/metadata.name": "ingress-nginx"}
            for s in rule["from"]
        )
    ]
    assert admitted


def test_the_ingress_takes_the_largest_body_an_agent_may_send():
    """ingress-nginx answers 413 to a body over proxy-body-size before the portal sees it; the
    agents' endpoints take up to MAX_BODY_BYTES."""
    ingress = find(overlay("in-cluster"), "Ingress", "portal-web")
    size = ingress["metadata"]["annotations"]["nginx.ingress.kubernetes.io/proxy-body-size"]
    match = re.fullmatch(r"(\d+)([kmg]?)", size.lower())
    assert match, size
    unit = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3}[match[2]]
    assert int(match[1]) * unit >= MAX_BODY_BYTES


# ingress-nginx keeps idle upstream connections this long unless the Ingress says otherwise.
INGRESS_NGINX_UPSTREAM_KEEPALIVE_S = 60


@pytest.mark.parametrize("deployment", ["portal-web", "portal-agent-api"])
def test_gunicorn_keeps_idle_connections_longer_than_the_ingress_does(deployment: str):
    """When gunicorn closed an idle connection first (its default: 2 s), a request the proxy
    sent on it at that moment failed (a 502); closed by the proxy, it never does."""
    objects = overlay("in-cluster")
    [container] = pod_spec(find(objects, "Deployment", deployment))["containers"]
    options = dict(a.split("=", 1) for a in container["command"][2:] if "=" in a)
    ingress = find(objects, "Ingress", "portal-web")
    annotations = ingress["metadata"].get("annotations", {})
    upstream = int(
        annotations.get(
            "nginx.ingress.kubernetes.io/upstream-keepalive-timeout",
            INGRESS_NGINX_UPSTREAM_KEEPALIVE_S,
        )
    )
    assert float(options["--keep-alive"]) > upstream
