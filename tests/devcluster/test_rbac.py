"""RBAC as the API server enforces it: bindings to Roles and ClusterRoles for users, groups and
service accounts; verbs, resources, subresources and resourceNames; upstream's bootstrap and
Kueue roles (with aggregation); RBAC's escalation checks; access reviews; and the forbidden
messages users see, through the official client and the real kubectl."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic import DynamicClient

from tests.devcluster.conftest import Kubectl, MakeClient, MakeKubectl
from tests.devcluster.test_identities import (
    NS,
    RBAC,
    cluster_role,
    cluster_role_binding,
    create,
    group,
    namespace,
    role_binding,
    service_account,
    status,
    user,
)

KUEUE = "kueue.x-k8s.io/v1beta2"


def configmap(name: str, ns: str = NS) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": ns}}


def pod(name: str, ns: str = NS) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"containers": [{"name": "main", "image": "trainer:1"}]},
    }


def role(name: str, *rules: dict[str, Any], ns: str = NS) -> dict[str, Any]:
    return {
        "apiVersion": f"{RBAC}/v1",
        "kind": "Role",
        "metadata": {"name": name, "namespace": ns},
        "rules": list(rules),
    }


def rule(groups: list[str], resources: list[str], verbs: list[str], **extra: Any) -> dict:
    return {"apiGroups": groups, "resources": resources, "verbs": verbs, **extra}


@pytest.fixture
def teams(admin_client: ApiClient) -> ApiClient:
    create(admin_client, namespace(NS), namespace("team-b"), service_account("runner"))
    return admin_client


def can_i(kubectl: Kubectl, *args: str) -> bool:
    answer = kubectl("auth", "can-i", *args, check=False).stdout.strip()
    assert answer in ("yes", "no"), answer
    return answer == "yes"


# Forbidden answers --------------------------------------------------------------------------------


def test_forbidden_messages_are_the_api_servers(teams: ApiClient, client_as: MakeClient) -> None:
    alice = client_as("alice")
    create(teams, role_binding("alice-edit", "edit", user("alice")))
    core = client.CoreV1Api(alice)
    core.create_namespaced_pod(NS, pod("p"))  # edit, in team-a
    with pytest.raises(ApiException) as error:
        core.create_namespaced_pod("team-b", pod("p", "team-b"))
    refused = status(error)
    assert refused["code"] == 403 and refused["reason"] == "Forbidden"
    assert refused["message"] == (
        'pods is forbidden: User "alice" cannot create resource "pods" in API group "" in the '
        'namespace "team-b"'
    )
    assert refused["details"] == {"kind": "pods"}
    with pytest.raises(ApiException) as error:
        client.CustomObjectsApi(alice).get_cluster_custom_object(
            "kueue.x-k8s.io", "v1beta2", "clusterqueues", "team-a"
        )
    assert status(error)["message"] == (
        'clusterqueues.kueue.x-k8s.io "team-a" is forbidden: User "alice" cannot get resource '
        '"clusterqueues" in API group "kueue.x-k8s.io" at the cluster scope'
    )
    assert status(error)["details"] == {
        "name": "team-a",
        "group": "kueue.x-k8s.io",
        "kind": "clusterqueues",
    }
    with pytest.raises(ApiException) as error:
        core.patch_namespaced_pod_status("p", NS, {"status": {"phase": "Running"}})
    assert status(error)["message"] == (
        'pods "p" is forbidden: User "alice" cannot patch resource "pods/status" in API group "" '
        'in the namespace "team-a"'
    )


def test_kubectl_shows_the_refusal(teams: ApiClient, kubectl_as: MakeKubectl) -> None:
    bob = kubectl_as("bob", ("gpu-team-b",))
    refused = bob("get", "pods", "-n", NS, check=False)
    assert refused.returncode == 1
    assert refused.stderr.strip() == (
        'Error from server (Forbidden): pods is forbidden: User "bob" cannot list resource '
        '"pods" in API group "" in the namespace "team-a"'
    )


def test_discovery_and_version_are_open_to_authenticated_users(
    teams: ApiClient, kubectl_as: MakeKubectl
) -> None:
    nobody = kubectl_as("nobody")
    assert "clusterqueues" in nobody("api-resources").stdout
    assert "Server Version" in nobody("version").stdout
    refused = nobody("get", "--raw", "/metrics", check=False)
    assert 'forbidden: User "nobody" cannot get path "/metrics"' in refused.stderr


# Bindings and rules ----------------------------------------------------------------------------------


def test_a_role_with_resource_names_allows_only_those_objects(
    teams: ApiClient, client_as: MakeClient
) -> None:
    create(
        teams,
        configmap("settings"),
        configmap("secret-ish"),
        role("read-settings", rule([""], ["configmaps"], ["get", "list"],
                                   resourceNames=["settings"])),
        role_binding("alice-settings", "read-settings", user("alice"), kind="Role"),
    )  # fmt: skip
    core = client.CoreV1Api(client_as("alice"))
    assert core.read_namespaced_config_map("settings", NS).metadata.name == "settings"
    with pytest.raises(ApiException) as error:
        core.read_namespaced_config_map("secret-ish", NS)
    assert error.value.status == 403
    with pytest.raises(ApiException):
        core.list_namespaced_config_map(NS)  # a list names no object
    # ... unless it selects that one object by name, as kubectl get cm settings -w does.
    named = core.list_namespaced_config_map(NS, field_selector="metadata.name=settings")
    assert [c.metadata.name for c in named.items] == ["settings"]


def test_groups_and_service_accounts_are_subjects(
    teams: ApiClient, client_as: MakeClient, devcluster: Any
) -> None:
    create(
        teams,
        role_binding("team-a-view", "view", group("gpu-team-a")),
        # A ServiceAccount subject without a namespace is in the binding's namespace.
        role_binding("runner-edit", "edit", {"kind": "ServiceAccount", "name": "runner"}),
    )
    member = client.CoreV1Api(client_as("alice", ("gpu-team-a",)))
    assert member.list_namespaced_pod(NS).items == []
    with pytest.raises(ApiException):
        member.create_namespaced_pod(NS, pod("p"))
    outsider = client.CoreV1Api(client_as("alice", ("gpu-team-b",)))
    with pytest.raises(ApiException):
        outsider.list_namespaced_pod(NS)
    token = devcluster.service_account_token(NS, "runner")
    runner = client.CoreV1Api(client_as("runner", token=token))
    runner.create_namespaced_pod(NS, pod("p"))
    with pytest.raises(ApiException):
        runner.create_namespaced_pod("team-b", pod("p", "team-b"))


def test_subresources_wildcards_and_server_side_apply(
    teams: ApiClient, client_as: MakeClient
) -> None:
    create(
        teams,
        pod("p"),
        role("status-writer", rule([""], ["*/status"], ["patch"]), rule([""], ["pods"], ["get"])),
        role_binding("kubelet-ish", "status-writer", user("node"), kind="Role"),
        role("cm-patcher", rule([""], ["configmaps"], ["patch", "get"])),
        role_binding("patcher", "cm-patcher", user("patcher"), kind="Role"),
    )
    node = client.CoreV1Api(client_as("node"))
    node.patch_namespaced_pod_status("p", NS, {"status": {"phase": "Running"}})
    with pytest.raises(ApiException):
        node.patch_namespaced_pod("p", NS, {"metadata": {"labels": {"a": "b"}}})
    # Server-side apply is the patch verb, and creating through it needs create too.
    dynamic = DynamicClient(client_as("patcher"))
    configmaps = dynamic.resources.get(api_version="v1", kind="ConfigMap")
    with pytest.raises(ApiException) as error:
        configmaps.server_side_apply(body=configmap("new"), namespace=NS, field_manager="me")
    assert status(error)["message"] == (
        'configmaps "new" is forbidden: User "patcher" cannot create resource "configmaps" in '
        'API group "" in the namespace "team-a"'
    )
    create(teams, configmap("old"))
    applied = {**configmap("old"), "data": {"k": "v"}}
    configmaps.server_side_apply(body=applied, namespace=NS, field_manager="me")


def test_a_binding_to_a_missing_role_says_so(teams: ApiClient, client_as: MakeClient) -> None:
    create(teams, role_binding("dangling", "not-there", user("alice")))
    with pytest.raises(ApiException) as error:
        client.CoreV1Api(client_as("alice")).list_namespaced_pod(NS)
    assert status(error)["message"].endswith(
        ': clusterroles.rbac.authorization.k8s.io "not-there" not found'
    )


# The bootstrap roles ----------------------------------------------------------------------------------


def test_edit_admin_and_view_as_upstream(teams: ApiClient, kubectl: Kubectl) -> None:
    create(
        teams,
        role_binding("e", "edit", user("ed")),
        role_binding("a", "admin", user("ada")),
        role_binding("v", "view", user("vi")),
    )

    def may(who: str, *args: str) -> bool:
        return can_i(kubectl, *args, "-n", NS, "--as", who)

    for resource in ("secrets", "pods", "deployments.apps", "jobs.batch", "cronjobs.batch",
                     "statefulsets.apps", "replicasets.apps", "services",
                     "configmaps", "persistentvolumeclaims", "serviceaccounts"):  # fmt: skip
        assert may("ed", "create", resource), resource
        assert may("ada", "create", resource), resource
        assert not may("vi", "create", resource), resource
    assert not may("ed", "create", "rolebindings.rbac.authorization.k8s.io")
    assert may("ada", "create", "rolebindings.rbac.authorization.k8s.io")
    assert may("vi", "list", "pods") and not may("vi", "get", "secrets")
    assert may("vi", "get", "localqueues.kueue.x-k8s.io")  # Kueue's viewer role aggregates
    assert not may("ed", "create", "localqueues.kueue.x-k8s.io")
    assert not may("ada", "delete", "namespaces")
    assert not can_i(kubectl, "list", "pods", "-n", "team-b", "--as", "ed")


def test_kubectl_auth_can_i_list_shows_the_rules(teams: ApiClient, kubectl: Kubectl) -> None:
    create(
        teams,
        role("reader", rule([""], ["configmaps"], ["get"], resourceNames=["settings"])),
        role_binding("r", "reader", user("rita"), kind="Role"),
    )
    listed = kubectl("auth", "can-i", "--list", "-n", NS, "--as", "rita").stdout
    lines = [line.split() for line in listed.splitlines()]
    assert ["configmaps", "[]", "[settings]", "[get]"] in lines
    assert ["selfsubjectaccessreviews.authorization.k8s.io", "[]", "[]", "[create]"] in lines
    assert ["[/api/*]", "[]", "[get]"] in lines
    assert not any(line[0] == "pods" for line in lines if line)


def test_kueue_batch_roles(teams: ApiClient, kubectl: Kubectl) -> None:
    create(
        teams,
        role_binding("users", "kueue-batch-user-role", group("researchers")),
        cluster_role_binding("admins", "kueue-batch-admin-role", group("batch-admins")),
    )

    def may(who: str, *args: str) -> bool:
        return can_i(kubectl, *args, "--as", "x", "--as-group", who)

    assert may("researchers", "create", "jobs.batch", "-n", NS)
    assert may("researchers", "list", "localqueues.kueue.x-k8s.io", "-n", NS)
    assert may("researchers", "get", "workloads.kueue.x-k8s.io", "-n", NS)
    assert not may("researchers", "create", "localqueues.kueue.x-k8s.io", "-n", NS)
    assert not may("researchers", "create", "pods", "-n", NS)
    assert not may("researchers", "create", "jobs.batch", "-n", "team-b")
    assert may("batch-admins", "create", "clusterqueues.kueue.x-k8s.io")
    assert may("batch-admins", "update", "resourceflavors.kueue.x-k8s.io")
    assert may("batch-admins", "delete", "localqueues.kueue.x-k8s.io", "-n", "team-b")
    assert not may(
        "batch-admins", "update", "clusterqueues.kueue.x-k8s.io", "--subresource", "status"
    )
    assert may("batch-admins", "get", "clusterqueues.kueue.x-k8s.io", "--subresource", "status")


def test_controllers_may_create_pods_as_on_a_cluster(teams: ApiClient, kubectl: Kubectl) -> None:
    for controller in (
        "system:serviceaccount:kube-system:job-controller",
        "system:serviceaccount:kube-system:replicaset-controller",
        "system:kube-controller-manager",
    ):
        created = kubectl(
            "create", "-f", "-", "--as", controller,
            stdin=json.dumps(pod(controller.rsplit(":", 1)[-1])),
        )  # fmt: skip
        assert "created" in created.stdout
    kueue = "system:serviceaccount:kueue-system:kueue-controller-manager"
    assert can_i(kubectl, "update", "clusterqueues.kueue.x-k8s.io/status", "--as", kueue)
    assert can_i(kubectl, "patch", "pods", "-n", NS, "--as", kueue)
    assert not can_i(kubectl, "create", "pods", "-n", NS, "--as", kueue)
    assert not can_i(
        kubectl, "create", "secrets", "-n", NS, "--as", "system:kube-controller-manager" + "x"
    )


# Aggregation -------------------------------------------------------------------------------------------


def test_labelled_cluster_roles_aggregate_into_view_and_out_again(
    teams: ApiClient, kubectl: Kubectl
) -> None:
    create(teams, role_binding("v", "view", user("vi")))
    assert not can_i(kubectl, "list", "cohorts.kueue.x-k8s.io", "--as", "vi", "-n", NS)
    extra = cluster_role(
        "cohort-viewer", rule(["kueue.x-k8s.io"], ["cohorts"], ["get", "list", "watch"])
    )
    extra["metadata"]["labels"] = {"rbac.authorization.k8s.io/aggregate-to-view": "true"}
    create(teams, extra)
    view = client.RbacAuthorizationV1Api(teams).read_cluster_role("view")
    assert {"cohorts"} <= {r for rule_ in view.rules for r in rule_.resources}
    assert can_i(kubectl, "list", "cohorts.kueue.x-k8s.io", "--as", "vi", "-n", NS)
    # view is aggregated into edit, and edit into admin.
    admin = client.RbacAuthorizationV1Api(teams).read_cluster_role("admin")
    assert {"cohorts"} <= {r for rule_ in admin.rules for r in rule_.resources}
    kubectl("label", "clusterrole", "cohort-viewer", "rbac.authorization.k8s.io/aggregate-to-view-")
    assert not can_i(kubectl, "list", "cohorts.kueue.x-k8s.io", "--as", "vi", "-n", NS)


def test_reset_brings_the_bootstrap_roles_back(teams: ApiClient, devcluster: Any) -> None:
    rbac = client.RbacAuthorizationV1Api(teams)
    rbac.delete_cluster_role("edit")
    devcluster.reset()
    edit = rbac.read_cluster_role("edit")
    assert edit.aggregation_rule.cluster_role_selectors[0].match_labels == {
        "rbac.authorization.k8s.io/aggregate-to-edit": "true"
    }
    assert any("secrets" in r.resources for r in edit.rules)
    assert {b.metadata.name for b in rbac.list_cluster_role_binding().items} >= {
        "cluster-admin", "system:basic-user", "system:discovery", "system:public-info-viewer",
    }  # fmt: skip


# Escalation -----------------------------------------------------------------------------------------


def test_a_user_cannot_bind_themselves_to_cluster_admin(
    teams: ApiClient, client_as: MakeClient, kubectl_as: MakeKubectl
) -> None:
    create(
        teams,
        role_binding("bob-admin", "admin", user("bob")),
        cluster_role("binder", rule([RBAC], ["clusterrolebindings", "rolebindings"], ["create"])),
        cluster_role_binding("bob-binder", "binder", user("bob")),
    )
    bob = client.RbacAuthorizationV1Api(client_as("bob"))
    with pytest.raises(ApiException) as error:
        bob.create_cluster_role_binding(
            cluster_role_binding("bob-root", "cluster-admin", user("bob"))
        )
    assert status(error)["message"] == (
        'clusterrolebindings.rbac.authorization.k8s.io "bob-root" is forbidden: user "bob" '
        '(groups=["system:authenticated"]) is attempting to grant RBAC permissions not '
        'currently held:\n{APIGroups:["*"], Resources:["*"], Verbs:["*"]}\n'
        '{NonResourceURLs:["*"], Verbs:["*"]}'
    )
    with pytest.raises(ApiException):
        bob.create_namespaced_role_binding(
            NS, role_binding("bob-root", "cluster-admin", user("bob"))
        )
    # Granting what he holds (edit, inside admin, in his namespace) is fine; elsewhere not.
    bob.create_namespaced_role_binding(NS, role_binding("carol-edit", "edit", user("carol")))
    with pytest.raises(ApiException) as error:
        bob.create_namespaced_role_binding(
            "team-b", role_binding("carol-edit", "edit", user("carol"), ns="team-b")
        )
    assert (
        "is attempting to grant RBAC permissions not currently held" in (status(error)["message"])
    )
    # The bind verb on that role, by name, lets him.
    create(
        teams,
        cluster_role("bind-view", rule([RBAC], ["clusterroles"], ["bind"], resourceNames=["view"])),
        cluster_role_binding("bob-bind-view", "bind-view", user("bob")),
    )
    bob.create_namespaced_role_binding(
        "team-b", role_binding("carol-view", "view", user("carol"), ns="team-b")
    )
    with pytest.raises(ApiException):
        bob.create_namespaced_role_binding(
            "team-b", role_binding("carol-edit", "edit", user("carol"), ns="team-b")
        )
    refused = kubectl_as("bob")(
        "create", "-f", "-",
        stdin=json.dumps(cluster_role_binding("bob-root", "cluster-admin", user("bob"))),
        check=False,
    )  # fmt: skip
    assert "is attempting to grant RBAC permissions not currently held" in refused.stderr


def test_a_service_account_cannot_grant_itself_edit_in_kube_system(
    teams: ApiClient, client_as: MakeClient, devcluster: Any
) -> None:
    """A portal-like account may manage RoleBindings but holds no edit rights there."""
    create(
        teams,
        service_account("portal", "kube-system"),
        cluster_role("binding-manager", rule([RBAC], ["rolebindings"], ["create", "get"])),
        cluster_role_binding(
            "portal-bindings", "binding-manager",
            {"kind": "ServiceAccount", "name": "portal", "namespace": "kube-system"},
        ),
    )  # fmt: skip
    token = devcluster.service_account_token("kube-system", "portal")
    portal = client.RbacAuthorizationV1Api(client_as("portal", token=token))
    with pytest.raises(ApiException) as error:
        portal.create_namespaced_role_binding(
            "kube-system",
            role_binding(
                "portal-edit", "edit",
                {"kind": "ServiceAccount", "name": "portal", "namespace": "kube-system"},
                ns="kube-system",
            ),
        )  # fmt: skip
    message = status(error)["message"]
    assert message.startswith(
        'rolebindings.rbac.authorization.k8s.io "portal-edit" is forbidden: user '
        '"system:serviceaccount:kube-system:portal" (groups=["system:serviceaccounts" '
        '"system:serviceaccounts:kube-system" "system:authenticated"]) is attempting to grant '
        "RBAC permissions not currently held:\n"
    )
    assert (
        '\n{APIGroups:[""], Resources:["secrets"], Verbs:["get" "list" "watch" "create" "delete" '
        '"deletecollection" "patch" "update"]}\n' in message
    )


def test_roles_with_rules_the_user_lacks_need_escalate(
    teams: ApiClient, client_as: MakeClient
) -> None:
    create(
        teams,
        role("role-writer", rule([RBAC], ["roles"], ["create", "update"]),
             rule([""], ["configmaps"], ["get"])),
        role_binding("w", "role-writer", user("wes"), kind="Role"),
    )  # fmt: skip
    wes = client.RbacAuthorizationV1Api(client_as("wes"))
    wes.create_namespaced_role(NS, role("cm-reader", rule([""], ["configmaps"], ["get"])))
    with pytest.raises(ApiException) as error:
        wes.create_namespaced_role(NS, role("secret-reader", rule([""], ["secrets"], ["get"])))
    assert status(error)["message"] == (
        'roles.rbac.authorization.k8s.io "secret-reader" is forbidden: user "wes" '
        '(groups=["system:authenticated"]) is attempting to grant RBAC permissions not currently '
        'held:\n{APIGroups:[""], Resources:["secrets"], Verbs:["get"]}'
    )
    create(
        teams,
        role("escalator", rule([RBAC], ["roles"], ["escalate"])),
        role_binding("e", "escalator", user("wes"), kind="Role"),
    )
    wes.create_namespaced_role(NS, role("secret-reader", rule([""], ["secrets"], ["get"])))


# Access reviews -------------------------------------------------------------------------------------------


def test_access_reviews_through_the_client(teams: ApiClient, client_as: MakeClient) -> None:
    create(teams, role_binding("alice-edit", "edit", user("alice")))
    authorization = client.AuthorizationV1Api(client_as("alice"))

    def self_review(**attributes: str) -> Any:
        body = {"spec": {"resourceAttributes": attributes}}
        return authorization.create_self_subject_access_review(body=body).status

    allowed = self_review(namespace=NS, verb="create", resource="pods")
    assert allowed.allowed
    assert allowed.reason == (
        'RBAC: allowed by RoleBinding "alice-edit/team-a" of ClusterRole "edit" to User "alice"'
    )
    assert not self_review(namespace="team-b", verb="create", resource="pods").allowed
    rules = authorization.create_self_subject_rules_review(body={"spec": {"namespace": NS}})
    assert any("pods" in r.resources and "create" in r.verbs for r in rules.status.resource_rules)
    assert not rules.status.incomplete
    with pytest.raises(ApiException) as error:
        authorization.create_subject_access_review(
            body={"spec": {"user": "bob", "resourceAttributes": {"verb": "get",
                                                                 "resource": "pods"}}}
        )  # fmt: skip
    assert error.value.status == 403
    review = client.AuthorizationV1Api(teams).create_subject_access_review(
        body={"spec": {"user": "alice", "groups": ["system:authenticated"],
                       "resourceAttributes": {"namespace": NS, "verb": "delete",
                                              "resource": "secrets"}}}
    )  # fmt: skip
    assert review.status.allowed


def test_discovery_lists_the_review_kinds_as_create_only(kubectl: Kubectl) -> None:
    listed = kubectl("api-resources", "--api-group", "authorization.k8s.io", "-o", "wide").stdout
    assert "selfsubjectaccessreviews" in listed and "subjectaccessreviews" in listed
    rows = [line.split() for line in listed.splitlines()[1:]]
    assert all(row[4] == "create" for row in rows), rows
