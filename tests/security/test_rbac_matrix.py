"""Who may do what in a cluster the portal manages: the portal's real push of the demo's
tenants into the local Kubernetes API stand-in (its RBAC and admission as the API server's),
the manifests of ``deploy/kubernetes/cluster-access`` and ``node-agent`` applied with the real
kubectl, then every identity the portal creates or runs as acts through HTTP with the official
client: a tenant's lead, member and viewer (the users its RoleBindings name), another tenant's
lead, the tenant's pipeline ServiceAccount (a TokenRequest token), the portal's own account,
the binder it impersonates, the web pods' read-only account and the node agent's.

Each cell is the API server's answer: a SelfSubjectAccessReview (``kubectl auth can-i``) where
RBAC decides, a real write where admission decides (RBAC says yes, the admission policy
refuses: shown ``no*``). ``pytest -s`` prints the matrix; docs/rbac.md carries it.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, config
from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException

from devcluster.kueue_sim import IDLE_NAME, idle_workload
from devcluster.runner import Handle
from quotas.kube import portal_access
from quotas.kube.applier import ApplyError, KubernetesBackend
from quotas.kube.resources import WORKLOAD
from quotas.kube.spec import LABEL_MANAGED_BY, MANAGED_BY
from quotas.sync import cluster_reconcile
from tenants.choices import MembershipRole
from tenants.services import membership_set, namespace_create
from tests.conftest import World
from tests.deploy.manifests import DEPLOY, KUBECTL, render
from tests.standin import point_at

TEAM_A = "team-a-training"
TEAM_B = "team-b-training"
AGENT_USERNAME = "system:serviceaccount:gpu-agent:gpu-agent"
PIPELINE = "team-a-workloads"
NODE = "gpu-node-1"
DRIVER_POD = "nvidia-driver-daemonset-x1"
PLUGIN_POD = "nvidia-device-plugin-daemonset-x1"
# Kinds the stand-in does not serve (the manifests' DaemonSet).
NOT_SERVED = {"DaemonSet"}


@dataclass
class Identity:
    label: str
    username: str
    api: ApiClient


# --- the scene ---------------------------------------------------------------------------------


def _admin(standin: Handle) -> ApiClient:
    return config.new_client_from_config(config_file=str(standin.kubeconfig_path))


def _apply(standin: Handle, objects: list[dict[str, Any]]) -> None:
    """The real kubectl, with the stand-in's admin kubeconfig."""
    text = yaml.safe_dump_all(sorted(objects, key=lambda o: o["kind"] != "Namespace"))
    done = subprocess.run(
        [str(KUBECTL), "--kubeconfig", str(standin.kubeconfig_path), "apply", "-f", "-"],
        input=text,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr


def _client_as(
    standin: Handle, tmp_path: Path, user: str, *, token: str | None = None
) -> ApiClient:
    path = tmp_path / f"kubeconfig-{user.replace(':', '-')}"
    standin.kubeconfig_for(user, path, token=token)
    return config.new_client_from_config(config_file=str(path))


def _create(api: ApiClient, body: dict[str, Any]) -> None:
    core = client.CoreV1Api(api)
    namespace = body["metadata"].get("namespace")
    kind = body["kind"]
    try:
        if kind == "Namespace":
            core.create_namespace(body)
        elif kind == "Node":
            core.create_node(body)
        elif kind == "Pod":
            core.create_namespaced_pod(namespace, body)
        elif kind == "ConfigMap":
            core.create_namespaced_config_map(namespace, body)
        else:
            raise AssertionError(kind)
    except ApiException as error:
        if error.status != 409:
            raise


def _pod(name: str, app: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "gpu-operator", "labels": {"app": app}},
        "spec": {"nodeName": NODE, "containers": [{"name": "main", "image": "nvcr.io/x:1"}]},
    }


def _gpu_operator_scene(admin: ApiClient) -> None:
    """What a GPU Operator install leaves: its namespace, a GPU node, the driver's and the
    device plugin's pods on it; and EKS's aws-auth ConfigMap in kube-system."""
    _create(
        admin,
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": NODE,
                "labels": {
                    "nvidia.com/gpu.product": "H100",
                    "nvidia.com/mig.config": "all-disabled",
                },
            },
        },
    )
    _create(admin, _pod(DRIVER_POD, "nvidia-driver-daemonset"))
    _create(admin, _pod(PLUGIN_POD, "nvidia-device-plugin-daemonset"))
    _create(
        admin,
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "aws-auth", "namespace": "kube-system"},
            "data": {"mapRoles": "- rolearn: arn:aws:iam::1:role/nodes\n"},
        },
    )


def _workload_scene(admin: ApiClient) -> None:
    """An idle notebook's Kueue Workload in team-a-training, suspended (spec.active false), as
    the idle rule leaves it for an alert's "reactivate"."""
    body, _status = idle_workload("team-a", "a100-80gb", datetime.now(UTC))
    body["spec"]["active"] = False
    client.CustomObjectsApi(admin).create_namespaced_custom_object(
        "kueue.x-k8s.io", "v1beta2", TEAM_A, "workloads", body
    )


@dataclass
class Scene:
    standin: Handle
    admin: ApiClient
    identities: list[Identity]
    portal_kubeconfig: Path


def _manifests() -> list[dict[str, Any]]:
    """cluster-access and node-agent as kustomize renders them, with the portal's namespace
    and its two ServiceAccounts (base), as an install applies them."""
    base = [o for o in render(DEPLOY / "base") if o["kind"] in {"Namespace", "ServiceAccount"}]
    parts = [*render(DEPLOY / "cluster-access"), *render(DEPLOY / "node-agent")]
    return [*base, *(o for o in parts if o["kind"] not in NOT_SERVED)]


@pytest.fixture
def scene(world: World, standin: Handle, tmp_path: Path) -> Scene:
    standin.reset()  # cluster-access goes in with kubectl, as an install applies it
    admin = _admin(standin)
    _create(
        admin,
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "gpu-operator"}},
    )
    _apply(standin, _manifests())
    # The portal's first push (as the cluster's admin: the tenants' namespaces do not exist).
    assert cluster_reconcile(cluster=world.a100).ok
    tokens = {
        "portal": standin.service_account_token(
            portal_access.PORTAL_NAMESPACE, portal_access.PORTAL_SERVICE_ACCOUNT
        ),
        "web": standin.service_account_token(
            portal_access.PORTAL_NAMESPACE, portal_access.WEB_SERVICE_ACCOUNT
        ),
        "agent": standin.service_account_token("gpu-agent", "gpu-agent"),
        "pipeline": standin.service_account_token(TEAM_A, PIPELINE),
    }
    portal = _client_as(standin, tmp_path, portal_access.PORTAL_USERNAME, token=tokens["portal"])
    # The push wrote the portal's RoleBinding in each namespace it manages, as the binder.
    binder = _client_as(standin, tmp_path, "binder", token=tokens["portal"])
    binder.set_default_header(portal_access.IMPERSONATE_USER, portal_access.BINDER_USERNAME)
    managed = client.CoreV1Api(admin).list_namespace(
        label_selector=f"{LABEL_MANAGED_BY}={MANAGED_BY}"
    )
    assert {TEAM_A, TEAM_B} <= {n.metadata.name for n in managed.items}
    for found in managed.items:
        own = client.RbacAuthorizationV1Api(admin).read_namespaced_role_binding(
            portal_access.ROLE_BINDING, found.metadata.name
        )
        assert own.role_ref.name == portal_access.NAMESPACE_ROLE
        assert [s.name for s in own.subjects] == [
            portal_access.PORTAL_SERVICE_ACCOUNT,
            portal_access.WEB_SERVICE_ACCOUNT,
        ]
        written_by = {m.manager for m in own.metadata.managed_fields or []}
        assert written_by == {"gpu-quota-portal"}, written_by
    _gpu_operator_scene(admin)
    _workload_scene(admin)
    portal_kubeconfig = tmp_path / f"kubeconfig-{portal_access.PORTAL_USERNAME.replace(':', '-')}"
    identities = [
        Identity("team-a lead (alice)", "alice", _client_as(standin, tmp_path, "alice")),
        Identity("team-a member (carol)", "carol", _client_as(standin, tmp_path, "carol")),
        Identity("team-a viewer (victor)", "victor", _client_as(standin, tmp_path, "victor")),
        Identity("team-b lead (bob)", "bob", _client_as(standin, tmp_path, "bob")),
        Identity(
            f"team-a pipeline SA ({PIPELINE})",
            f"system:serviceaccount:{TEAM_A}:{PIPELINE}",
            _client_as(standin, tmp_path, "pipeline", token=tokens["pipeline"]),
        ),
        Identity("portal (gpu-quota-portal)", portal_access.PORTAL_USERNAME, portal),
        Identity("binder (impersonated by the portal)", portal_access.BINDER_USERNAME, binder),
        Identity(
            "web pods (gpu-quota-portal-web)",
            portal_access.WEB_USERNAME,
            _client_as(standin, tmp_path, "web", token=tokens["web"]),
        ),
        Identity(
            "node agent (gpu-agent)",
            AGENT_USERNAME,
            _client_as(standin, tmp_path, "agent", token=tokens["agent"]),
        ),
    ]
    return Scene(standin, admin, identities, portal_kubeconfig)


# --- the actions -------------------------------------------------------------------------------

YES, NO, REFUSED = "yes", "no", "no*"  # REFUSED: RBAC allows it, the admission policy refuses


def can_i(
    verb: str, resource: str, namespace: str = "", *, group: str = "", name: str = ""
) -> Callable[[Identity, Scene], str]:
    def ask(identity: Identity, scene: Scene) -> str:
        review = client.AuthorizationV1Api(identity.api).create_self_subject_access_review(
            {
                "apiVersion": "authorization.k8s.io/v1",
                "kind": "SelfSubjectAccessReview",
                "spec": {
                    "resourceAttributes": {
                        "verb": verb,
                        "resource": resource,
                        "group": group,
                        "namespace": namespace,
                        "name": name,
                    }
                },
            }
        )
        return YES if review.status.allowed else NO

    return ask


def _refused(error: ApiException) -> str:
    assert error.status == 403, (error.status, error.body)
    return REFUSED if "ValidatingAdmissionPolicy" in str(error.body) else NO


def write(
    attempt: Callable[[ApiClient, Identity], Any], undo: Callable[[Scene], None] | None = None
) -> Callable[[Identity, Scene], str]:
    """A real request as the identity: yes when done (then undone by the admin), else why not."""

    def run(identity: Identity, scene: Scene) -> str:
        try:
            attempt(identity.api, identity)
        except ApiException as error:
            return _refused(error)
        if undo is not None:
            undo(scene)
        return YES

    return run


def _bind_edit_in_kube_system(api: ApiClient, identity: Identity) -> None:
    subject = (
        {"kind": "ServiceAccount", "name": identity.username.split(":")[3],
         "namespace": identity.username.split(":")[2]}
        if identity.username.startswith("system:serviceaccount:")
        else {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": identity.username}
    )  # fmt: skip
    client.RbacAuthorizationV1Api(api).create_namespaced_role_binding(
        "kube-system",
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "grab", "namespace": "kube-system"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
            "subjects": [subject],
        },
    )  # fmt: skip


def _unbind(scene: Scene) -> None:
    client.RbacAuthorizationV1Api(scene.admin).delete_namespaced_role_binding("grab", "kube-system")


def _patch_aws_auth(api: ApiClient, identity: Identity) -> None:
    client.CoreV1Api(api).patch_namespaced_config_map(
        "aws-auth",
        "kube-system",
        {
            "data": {
                "mapRoles": "- rolearn: arn:aws:iam::6:role/attacker\n  groups: [system:masters]\n"
            }
        },
    )


def _label_node(label: str, value: str) -> Callable[[ApiClient, Identity], None]:
    def patch(api: ApiClient, identity: Identity) -> None:
        client.CoreV1Api(api).patch_node(NODE, {"metadata": {"labels": {label: value}}})

    return patch


def _unlabel(label: str, value: str) -> Callable[[Scene], None]:
    def undo(scene: Scene) -> None:
        client.CoreV1Api(scene.admin).patch_node(NODE, {"metadata": {"labels": {label: value}}})

    return undo


def _delete_pod(name: str) -> Callable[[ApiClient, Identity], None]:
    def delete(api: ApiClient, identity: Identity) -> None:
        # The answer unread: the stand-in answers a Status where a server answers the Pod.
        client.CoreV1Api(api).delete_namespaced_pod(name, "gpu-operator", _preload_content=False)

    return delete


def _recreate(name: str, app: str) -> Callable[[Scene], None]:
    def undo(scene: Scene) -> None:
        _create(scene.admin, _pod(name, app))

    return undo


def _adopt_kube_system(api: ApiClient, identity: Identity) -> None:
    client.CoreV1Api(api).patch_namespace(
        "kube-system", {"metadata": {"labels": {LABEL_MANAGED_BY: MANAGED_BY}}}
    )


def _unadopt(scene: Scene) -> None:
    client.CoreV1Api(scene.admin).patch_namespace(
        "kube-system", {"metadata": {"labels": {LABEL_MANAGED_BY: None}}}
    )


def _quota(api: ApiClient, *, dry_run: bool) -> None:
    body = {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "grab", "namespace": TEAM_A},
        "spec": {"hard": {"requests.nvidia.com/gpu": "1000"}},
    }
    core = client.CoreV1Api(api)
    if dry_run:
        core.create_namespaced_resource_quota(TEAM_A, body, dry_run="All", _preload_content=False)
    else:
        core.create_namespaced_resource_quota(TEAM_A, body, _preload_content=False)


def _create_quota(api: ApiClient, identity: Identity) -> None:
    _quota(api, dry_run=False)


def _dry_run_quota(api: ApiClient, identity: Identity) -> None:
    _quota(api, dry_run=True)


def _drop_quota(scene: Scene) -> None:
    try:
        client.CoreV1Api(scene.admin).delete_namespaced_resource_quota(
            "grab", TEAM_A, _preload_content=False
        )
    except ApiException as error:
        assert error.status == 404  # a dry run left nothing


def _patch_workload(spec: dict[str, Any]) -> Callable[[ApiClient, Identity], None]:
    """A merge patch of the idle Workload's spec, as quotas.backends.workload_set_active sends."""

    def patch(api: ApiClient, identity: Identity) -> None:
        try:
            KubernetesBackend(api).merge_patch(
                WORKLOAD, namespace=TEAM_A, name=IDLE_NAME, body={"spec": spec}
            )
        except ApplyError as error:
            refused = ApiException(status=error.status, reason="refused")
            refused.body = error.message
            raise refused from error

    return patch


def _suspend_again(scene: Scene) -> None:
    KubernetesBackend(scene.admin).merge_patch(
        WORKLOAD,
        namespace=TEAM_A,
        name=IDLE_NAME,
        body={"spec": {"active": False, "queueName": "default"}},
    )


ACTIONS: dict[str, Callable[[Identity, Scene], str]] = {
    f"create pods -n {TEAM_A}": can_i("create", "pods", TEAM_A),
    f"create pods -n {TEAM_B}": can_i("create", "pods", TEAM_B),
    f"get secrets -n {TEAM_A}": can_i("get", "secrets", TEAM_A),
    "get secrets -n kube-system": can_i("get", "secrets", "kube-system"),
    "list resourcequotas (all namespaces)": can_i("list", "resourcequotas"),
    f"create rolebindings -n {TEAM_A}": can_i(
        "create", "rolebindings", TEAM_A, group="rbac.authorization.k8s.io"
    ),
    "create rolebindings -n kube-system": can_i(
        "create", "rolebindings", "kube-system", group="rbac.authorization.k8s.io"
    ),
    "create clusterrolebindings": can_i(
        "create", "clusterrolebindings", group="rbac.authorization.k8s.io"
    ),
    "impersonate the binder": can_i(
        "impersonate",
        "serviceaccounts",
        portal_access.PORTAL_NAMESPACE,
        name=portal_access.BINDER_SERVICE_ACCOUNT,
    ),
    "bind edit to itself in kube-system (write)": write(_bind_edit_in_kube_system, _unbind),
    "patch kube-system/aws-auth (write)": write(_patch_aws_auth),
    "label kube-system as the portal's (write)": write(_adopt_kube_system, _unadopt),
    "patch a node's unrelated label (write)": write(
        _label_node("node-role.kubernetes.io/worker", "x"),
        _unlabel("node-role.kubernetes.io/worker", None),  # type: ignore[arg-type]
    ),
    "patch a node's nvidia.com/mig.config (write)": write(
        _label_node("nvidia.com/mig.config", "all-1g.10gb"),
        _unlabel("nvidia.com/mig.config", "all-disabled"),
    ),
    "delete the driver pod in gpu-operator (write)": write(
        _delete_pod(DRIVER_POD), _recreate(DRIVER_POD, "nvidia-driver-daemonset")
    ),
    "delete a device plugin pod in gpu-operator (write)": write(
        _delete_pod(PLUGIN_POD), _recreate(PLUGIN_POD, "nvidia-device-plugin-daemonset")
    ),
    f"create a ResourceQuota in {TEAM_A} (write)": write(_create_quota, _drop_quota),
    "the same, dryRun=All (write)": write(_dry_run_quota, _drop_quota),
    f"reactivate a Workload in {TEAM_A} (write)": write(
        _patch_workload({"active": True}), _suspend_again
    ),
    "reactivate it into another queue (write)": write(
        _patch_workload({"active": True, "queueName": "other"}), _suspend_again
    ),
}

# Rows in the scene's order; columns in ACTIONS' order.
Y, N, R = YES, NO, REFUSED
EXPECTED: dict[str, list[str]] = {
    #                                 pods-a pods-b sec-a sec-ks rq  rb-a rb-ks crb imp bind aws adopt node mig drv plug | rq-a dry react queue
    "team-a lead (alice)":            [Y, N, Y, N, N, N, N, N, N, N, N, N, N, N, N, N, N, N, N, N],
    "team-a member (carol)":          [Y, N, Y, N, N, N, N, N, N, N, N, N, N, N, N, N, N, N, N, N],
    "team-a viewer (victor)":         [N, N, N, N, N, N, N, N, N, N, N, N, N, N, N, N, N, N, N, N],
    "team-b lead (bob)":              [N, Y, N, N, N, N, N, N, N, N, N, N, N, N, N, N, N, N, N, N],
    f"team-a pipeline SA ({PIPELINE})": [Y, N, Y, N, N, N, N, N, N, N, N, N, N, N, N, N, N, N, N, N],
    "portal (gpu-quota-portal)":      [N, N, N, N, Y, Y, N, N, Y, N, N, R, R, Y, R, Y, Y, Y, Y, R],
    "binder (impersonated by the portal)": [N, N, N, N, N, Y, Y, N, N, N, N, N, N, N, N, N, N, N, N, N],
    # RBAC lets the web pods' account do what a dry run of the portal's writes needs (so can-i
    # create rolebindings in a managed namespace is yes); its admission policy refuses every
    # write that is not a dry run, but a Workload's spec.active alone.
    "web pods (gpu-quota-portal-web)": [N, N, N, N, Y, Y, N, N, N, N, N, R, N, N, N, N, R, Y, Y, R],
    "node agent (gpu-agent)":         [N, N, N, N, N, N, N, N, N, N, N, N, N, N, R, Y, N, N, N, N],
}  # fmt: skip


def render_matrix(rows: dict[str, list[str]]) -> str:
    header = ["identity", *ACTIONS]
    lines = [
        "| " + " | ".join(header) + " |",
        "|" + "|".join("---" for _ in header) + "|",
    ]
    lines += ["| " + " | ".join([label, *cells]) + " |" for label, cells in rows.items()]
    return "\n".join(lines)


@pytest.mark.django_db
def test_who_may_do_what(scene: Scene, capsys: pytest.CaptureFixture[str]) -> None:
    found = {
        identity.label: [action(identity, scene) for action in ACTIONS.values()]
        for identity in scene.identities
    }
    with capsys.disabled():
        print("\n\nWho may do what in a cluster the portal manages (no*: RBAC allows it, the")
        print("admission policy refuses it)\n")
        print(render_matrix(found))
    assert found == EXPECTED


def _kubectl_as(standin: Handle, user: str, *args: str) -> str:
    """The real kubectl with the admin's kubeconfig and ``--as``: over plain http kubectl
    sends no credentials and is the unrestricted anonymous user, who may impersonate anyone."""
    done = subprocess.run(
        [str(KUBECTL), "--kubeconfig", str(standin.kubeconfig_path), "--as", user, *args],
        capture_output=True,
        text=True,
        timeout=60,
    )
    return done.stdout.strip() or done.stderr.strip()


@pytest.mark.django_db
def test_kubectl_as_says_the_same(scene: Scene) -> None:
    standin = scene.standin
    assert _kubectl_as(standin, "alice", "auth", "can-i", "create", "pods", "-n", TEAM_A) == "yes"
    assert _kubectl_as(standin, "alice", "auth", "can-i", "create", "pods", "-n", TEAM_B) == "no"
    assert _kubectl_as(standin, "victor", "auth", "can-i", "get", "pods", "-n", TEAM_A) == "yes"
    assert _kubectl_as(standin, "victor", "auth", "can-i", "delete", "pods", "-n", TEAM_A) == "no"
    portal = portal_access.PORTAL_USERNAME
    for namespace, answer in (("kube-system", "no"), ("default", "no"), (TEAM_A, "yes")):
        said = _kubectl_as(
            standin, portal, "auth", "can-i", "create", "rolebindings", "-n", namespace
        )
        assert said == answer, namespace
    assert (
        _kubectl_as(standin, portal, "auth", "can-i", "patch", "configmaps", "-n", "kube-system")
        == "no"
    )
    assert (
        _kubectl_as(standin, portal, "auth", "can-i", "get", "secrets", "--all-namespaces") == "no"
    )
    # The portal may patch nodes (RBAC): the admission policy refuses a label not its own.
    assert _kubectl_as(standin, portal, "auth", "can-i", "patch", "nodes") == "yes"

    # (A server-side apply: kubectl label and patch read the node first, which the portal may
    # not: it lists nodes, never gets one.)
    def label(text: str) -> str:
        key, value = text.split("=")
        node = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": NODE, "labels": {key: value}},
        }
        done = subprocess.run(
            [str(KUBECTL), "--kubeconfig", str(standin.kubeconfig_path), "--as", portal,
             "apply", "--server-side", "--force-conflicts", "--field-manager=gpu-quota-portal", "-f", "-"],
            input=json.dumps(node), capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        return done.stdout.strip() or done.stderr.strip()

    refused = label("node-role.kubernetes.io/control-plane=x")
    assert "ValidatingAdmissionPolicy 'gpu-quota-portal-confinement'" in refused, refused
    assert "serverside-applied" in label("nvidia.com/mig.config=all-1g.10gb")


@pytest.mark.django_db
def test_the_portal_pushes_with_its_own_account(world: World, scene: Scene) -> None:
    """The portal's push with its own token: a namespace new to the cluster is created,
    bound as the binder (the portal impersonates it; nothing made by hand) and filled; a new
    member of team-a reaches the tenant's RoleBindings; nothing is refused."""
    point_at(world.a100, scene.portal_kubeconfig)
    scene.standin.kubeconfig_for(
        portal_access.PORTAL_USERNAME,
        scene.portal_kubeconfig,
        token=scene.standin.service_account_token(
            portal_access.PORTAL_NAMESPACE, portal_access.PORTAL_SERVICE_ACCOUNT
        ),
    )
    membership_set(
        tenant=world.team_a, user=world.bob, role=MembershipRole.MEMBER, actor=world.admin
    )
    namespace_create(tenant=world.team_a, name="team-a-eval", purpose="general", actor=world.admin)
    scene.standin.reset_stats()
    outcome = cluster_reconcile(cluster=world.a100)
    assert outcome.ok, outcome
    rbac = client.RbacAuthorizationV1Api(scene.admin)
    edit = rbac.read_namespaced_role_binding("gpu-portal-edit", TEAM_A)
    assert "bob" in {s.name for s in edit.subjects}
    own = rbac.read_namespaced_role_binding(portal_access.ROLE_BINDING, "team-a-eval")
    assert own.role_ref.name == portal_access.NAMESPACE_ROLE
    assert client.CoreV1Api(scene.admin).list_namespaced_resource_quota("team-a-eval").items
    assert scene.standin.stats()["verb_kinds"].get("apply RoleBinding")
    bob = next(i for i in scene.identities if i.username == "bob")
    assert can_i("create", "pods", TEAM_A)(bob, scene) == YES
    # The same account, straight at kube-system: refused by RBAC.
    with pytest.raises(ApiException) as refused:
        client.CoreV1Api(
            config.new_client_from_config(str(scene.portal_kubeconfig))
        ).create_namespaced_service_account("kube-system", {"metadata": {"name": "x"}})
    assert refused.value.status == 403
    json.loads(refused.value.body)  # a Status, as the API server answers


@pytest.mark.django_db
def test_the_web_pods_account_reads_dry_runs_and_reactivates_and_changes_nothing_else(
    world: World, scene: Scene, tmp_path: Path
) -> None:
    """What the web pods do with their own account (docs/rbac.md): the tenant page's live
    figures are read; a quota request's server-side dry run gets the API server's verdict; an
    alert's reactivation sets the Workload's spec.active; the same push for real, or a
    reactivation that changes anything else, is refused by its admission policy."""
    from approvals.services import quota_request_dry_run
    from quotas.backends import workload_set_active
    from quotas.kube import compiler
    from quotas.sync import cluster_spec, in_cluster, tenant_specs
    from tests.approvals.conftest import file

    path = tmp_path / "kubeconfig-web"
    scene.standin.kubeconfig_for(
        portal_access.WEB_USERNAME,
        path,
        token=scene.standin.service_account_token(
            portal_access.PORTAL_NAMESPACE, portal_access.WEB_SERVICE_ACCOUNT
        ),
    )
    point_at(world.a100, path)
    live = in_cluster(tenant=world.team_a, cluster=world.a100)
    assert live.reachable, live.message
    assert {q["namespace"] for q in live.resource_quotas} >= {TEAM_A}
    request = file(world)
    dry_run = quota_request_dry_run(request=request)
    assert dry_run.objects  # the compiler's diff, computed in the portal
    assert dry_run.server_checked, dry_run.server_message
    assert dry_run.server_errors == [], dry_run.server_errors

    workload_set_active(cluster=world.a100, namespace=TEAM_A, name=IDLE_NAME, active=True)
    workloads = client.CustomObjectsApi(scene.admin)
    found = workloads.get_namespaced_custom_object(
        "kueue.x-k8s.io", "v1beta2", TEAM_A, "workloads", IDLE_NAME
    )
    assert found["spec"]["active"] is True

    # The push's own write of the tenant's quota, with the web pods' token: as a dry run it
    # passes; for real the policy refuses it, and nothing changed.
    [spec] = tenant_specs(world.a100, tenant_ids=[world.team_a.pk])
    quota = next(
        o
        for o in compiler.compile_tenant(cluster_spec(world.a100), spec)
        if o["kind"] == "ResourceQuota" and o["metadata"]["namespace"] == TEAM_A
    )
    quota["spec"]["hard"]["pods"] = "12345"
    backend = KubernetesBackend.from_kubeconfig(str(path))
    try:
        backend.apply(quota, dry_run=True)
        with pytest.raises(ApplyError, match="ValidatingAdmissionPolicy 'gpu-quota-portal-web'"):
            backend.apply(quota)
    finally:
        backend.close()
    live_quota = client.CoreV1Api(scene.admin).read_namespaced_resource_quota(
        quota["metadata"]["name"], TEAM_A
    )
    assert live_quota.spec.hard.get("pods") != "12345"
