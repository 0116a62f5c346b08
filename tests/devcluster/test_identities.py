"""Who a request comes from: issued user tokens, ServiceAccount tokens (TokenRequest), the
static admin token, the anonymous user of plain http, TokenReview, impersonation, and the
``request.userInfo`` admission policies see; through the official client and the real kubectl."""

from __future__ import annotations

import json
import subprocess
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException

from devcluster import Handle, accept_everything, start_in_subprocess, start_in_thread
from tests.devcluster.conftest import Kubectl, MakeClient, MakeKubectl, make_kubectl

NS = "team-a"
RBAC = "rbac.authorization.k8s.io"


def create(admin: ApiClient, *objects: dict[str, Any]) -> None:
    """Create objects as the cluster admin (the static token)."""
    from kubernetes.dynamic import DynamicClient

    dynamic = DynamicClient(admin)
    for obj in objects:
        resource = dynamic.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
        namespace = obj["metadata"].get("namespace")
        resource.create(body=obj, namespace=namespace)


def namespace(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}


def service_account(name: str, ns: str = NS) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {"name": name, "namespace": ns},
    }


def cluster_role(name: str, *rules: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": f"{RBAC}/v1",
        "kind": "ClusterRole",
        "metadata": {"name": name},
        "rules": list(rules),
    }


def cluster_role_binding(name: str, role: str, *subjects: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": f"{RBAC}/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": name},
        "roleRef": {"apiGroup": RBAC, "kind": "ClusterRole", "name": role},
        "subjects": list(subjects),
    }


def role_binding(
    name: str, role: str, *subjects: dict[str, Any], ns: str = NS, kind: str = "ClusterRole"
) -> dict[str, Any]:
    return {
        "apiVersion": f"{RBAC}/v1",
        "kind": "RoleBinding",
        "metadata": {"name": name, "namespace": ns},
        "roleRef": {"apiGroup": RBAC, "kind": kind, "name": role},
        "subjects": list(subjects),
    }


def user(name: str) -> dict[str, Any]:
    return {"apiGroup": RBAC, "kind": "User", "name": name}


def group(name: str) -> dict[str, Any]:
    return {"apiGroup": RBAC, "kind": "Group", "name": name}


def whoami(api: ApiClient) -> dict[str, Any]:
    review = client.AuthenticationV1Api(api).create_self_subject_review(
        body={"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
    )
    info: dict[str, Any] = review.status.user_info.to_dict()
    return {k: v for k, v in info.items() if v is not None}


def status(error: pytest.ExceptionInfo[ApiException]) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(error.value.body)
    return body


@pytest.fixture
def team_a(admin_client: ApiClient) -> ApiClient:
    create(admin_client, namespace(NS), service_account("runner"))
    return admin_client


# Tokens --------------------------------------------------------------------------------------------


def test_a_user_token_is_that_user_with_system_authenticated(
    client_as: MakeClient, kubectl_as: MakeKubectl
) -> None:
    assert whoami(client_as("alice", ("gpu-team-a",))) == {
        "username": "alice",
        "groups": ["gpu-team-a", "system:authenticated"],
    }
    shown = kubectl_as("bob", ("gpu-team-b",))("auth", "whoami", "-o", "json").stdout
    assert json.loads(shown)["status"]["userInfo"] == {
        "username": "bob",
        "groups": ["gpu-team-b", "system:authenticated"],
    }


def test_the_static_token_is_the_cluster_admin(admin_client: ApiClient) -> None:
    assert whoami(admin_client) == {
        "username": "devcluster-admin",
        "groups": ["system:masters", "system:authenticated"],
    }


def test_a_token_the_stand_in_did_not_issue_is_401(devcluster: Handle) -> None:
    request = urllib.request.Request(  # noqa: S310 - the stand-in's own URL
        devcluster.url + "/api/v1/namespaces", headers={"Authorization": "Bearer made-up"}
    )
    with pytest.raises(urllib.error.HTTPError) as error:
        urllib.request.urlopen(request, timeout=5)  # noqa: S310 - as above
    assert error.value.code == 401
    assert json.loads(error.value.read())["message"] == "Unauthorized"


def test_the_admin_route_issues_tokens(devcluster: Handle) -> None:
    request = urllib.request.Request(  # noqa: S310 - the stand-in's own URL
        devcluster.url + "/_devcluster/tokens",
        data=json.dumps({"user": "carol", "groups": ["ops"]}).encode(),
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=5) as response:  # noqa: S310 - as above
        issued = json.loads(response.read())
    assert issued["user"] == {"username": "carol", "groups": ["ops", "system:authenticated"]}
    review = urllib.request.Request(  # noqa: S310 - as above
        devcluster.url + "/apis/authentication.k8s.io/v1/selfsubjectreviews",
        data=b'{"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}',
        method="POST",
        headers={"Authorization": f"Bearer {issued['token']}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(review, timeout=5) as response:  # noqa: S310 - as above
        assert json.loads(response.read())["status"]["userInfo"]["username"] == "carol"


def test_tokens_survive_a_restart_with_the_state_dir(tmp_path: Path) -> None:
    first = start_in_thread(
        kubeconfig_path=tmp_path / "kubeconfig", state_dir=tmp_path / "state",
        validator=accept_everything, require_token=True,
    )  # fmt: skip
    try:
        token = first.token_for("alice", ["gpu-team-a"])
    finally:
        first.stop()
    second = start_in_thread(
        kubeconfig_path=tmp_path / "kubeconfig", state_dir=tmp_path / "state",
        validator=accept_everything, require_token=True,
    )  # fmt: skip
    try:
        api = ApiClient(client.Configuration(host=second.url))
        api.set_default_header("Authorization", f"Bearer {token}")
        assert whoami(api)["username"] == "alice"
    finally:
        second.stop()


def test_the_anonymous_user_of_plain_http_may_do_anything(kubectl: Kubectl) -> None:
    """kubectl sends no credentials over http: it is the old insecure port's user."""
    shown = json.loads(kubectl("auth", "whoami", "-o", "json").stdout)["status"]["userInfo"]
    assert shown == {"username": "system:anonymous", "groups": ["system:unauthenticated"]}
    assert kubectl("auth", "can-i", "delete", "namespaces").stdout.strip() == "yes"
    kubectl("get", "clusterroles", "cluster-admin")


# ServiceAccount tokens -----------------------------------------------------------------------------


def test_kubectl_create_token_acts_as_the_service_account_until_it_is_deleted(
    team_a: ApiClient, kubectl: Kubectl, kubectl_as: MakeKubectl, client_as: MakeClient
) -> None:
    token = kubectl("create", "token", "runner", "-n", NS, "--duration=1h").stdout.strip()
    account = kubectl_as("runner", token=token)
    shown = json.loads(account("auth", "whoami", "-o", "json").stdout)["status"]["userInfo"]
    uid = client.CoreV1Api(team_a).read_namespaced_service_account("runner", NS).metadata.uid
    assert shown["username"] == "system:serviceaccount:team-a:runner"
    assert shown["groups"] == [
        "system:serviceaccounts",
        "system:serviceaccounts:team-a",
        "system:authenticated",
    ]
    assert shown["uid"] == uid
    # Bound to a role through a ServiceAccount subject, it may read its namespace's pods.
    create(
        team_a,
        role_binding("runner-view", "view", {"kind": "ServiceAccount", "name": "runner"}),
    )
    assert account("auth", "can-i", "list", "pods", "-n", NS).stdout.strip() == "yes"
    assert account("get", "pods", "-n", NS).returncode == 0

    client.CoreV1Api(team_a).delete_namespaced_service_account("runner", NS)
    refused = account("get", "pods", "-n", NS, check=False)
    assert refused.returncode == 1
    assert "You must be logged in to the server (Unauthorized)" in refused.stderr
    # A new ServiceAccount of the same name is another one: the old token stays dead.
    create(team_a, service_account("runner"))
    with pytest.raises(ApiException) as error:
        whoami(client_as("runner", token=token))
    assert error.value.status == 401


def test_a_service_account_token_expires(
    team_a: ApiClient, devcluster: Handle, client_as: MakeClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    token = devcluster.service_account_token(NS, "runner", expiration_seconds=600)
    api = client_as("runner", token=token)
    assert whoami(api)["username"] == "system:serviceaccount:team-a:runner"
    tokens = devcluster.cluster.tokens
    clock = tokens.now
    monkeypatch.setattr(tokens, "now", lambda: clock() + 601)
    with pytest.raises(ApiException) as error:
        whoami(api)
    assert error.value.status == 401


def test_token_requests_need_an_existing_service_account_and_ten_minutes(
    team_a: ApiClient, kubectl: Kubectl
) -> None:
    missing = kubectl("create", "token", "nobody", "-n", NS, check=False)
    assert missing.returncode == 1
    assert 'serviceaccounts "nobody" not found' in missing.stderr
    short = kubectl("create", "token", "runner", "-n", NS, "--duration=1m", check=False)
    assert short.returncode == 1
    assert (
        "spec.expirationSeconds: Invalid value: 60: may not specify a duration less than 10 "
        "minutes" in short.stderr
    )
    requested = client.CoreV1Api(team_a).create_namespaced_service_account_token(
        "runner", NS, body={"spec": {"audiences": ["portal"], "expirationSeconds": 3600}}
    )
    assert requested.spec.expiration_seconds == 3600
    assert requested.status.token and requested.status.expiration_timestamp


def test_creating_a_token_is_the_create_verb_on_serviceaccounts_token(
    team_a: ApiClient, kubectl_as: MakeKubectl
) -> None:
    viewer = kubectl_as("vera")
    create(team_a, role_binding("vera-view", "view", user("vera")))
    refused = viewer("create", "token", "runner", "-n", NS, check=False)
    assert (
        'serviceaccounts "runner" is forbidden: User "vera" cannot create resource '
        '"serviceaccounts/token" in API group "" in the namespace "team-a"' in refused.stderr
    )
    create(team_a, role_binding("vera-edit", "edit", user("vera")))  # edit may
    assert viewer("create", "token", "runner", "-n", NS).stdout.startswith("dc-sa-")


def test_token_review_answers_for_tokens_the_stand_in_issued(
    team_a: ApiClient, devcluster: Handle, client_as: MakeClient
) -> None:
    """What the portal does with node agents' ServiceAccount tokens."""
    create(
        team_a,
        cluster_role_binding("portal-auth", "system:auth-delegator", user("portal")),
    )
    reviewer = client.AuthenticationV1Api(client_as("portal"))
    token = devcluster.service_account_token(NS, "runner")

    def review(presented: str, audiences: list[str] | None = None) -> dict[str, Any]:
        body: dict[str, Any] = {"spec": {"token": presented}}
        if audiences:
            body["spec"]["audiences"] = audiences
        answer: dict[str, Any] = reviewer.create_token_review(body=body).status.to_dict()
        return answer

    known = review(token)
    assert known["authenticated"] is True
    assert known["user"]["username"] == "system:serviceaccount:team-a:runner"
    assert "system:serviceaccounts:team-a" in known["user"]["groups"]
    assert not review("not-a-token")["authenticated"]
    assert not review(token, ["https://elsewhere"])["authenticated"]
    with pytest.raises(ApiException) as error:
        client.AuthenticationV1Api(client_as("mallory")).create_token_review(
            body={"spec": {"token": token}}
        )
    assert status(error)["message"] == (
        'tokenreviews.authentication.k8s.io is forbidden: User "mallory" cannot create resource '
        '"tokenreviews" in API group "authentication.k8s.io" at the cluster scope'
    )


# Impersonation -------------------------------------------------------------------------------------


def test_impersonating_without_permission_is_refused(
    team_a: ApiClient, kubectl_as: MakeKubectl
) -> None:
    bob = kubectl_as("bob")
    # kubectl's discovery is cached first, as bob (with --as it would be refused too, and
    # kubectl then shows only "unknown", as against a real server).
    bob("api-resources")
    refused = bob("get", "pods", "-n", NS, "--as", "alice", check=False)
    assert refused.returncode == 1
    assert (
        'Error from server (Forbidden): users "alice" is forbidden: User "bob" cannot '
        'impersonate resource "users" in API group "" at the cluster scope'
    ) in refused.stderr
    # Allowed to impersonate alice, by name only, and not her groups.
    create(
        team_a,
        cluster_role(
            "impersonate-alice",
            {"apiGroups": [""], "resources": ["users"], "resourceNames": ["alice"],
             "verbs": ["impersonate"]},
        ),
        cluster_role_binding("bob-as-alice", "impersonate-alice", user("bob")),
        role_binding("alice-view", "view", user("alice")),
    )  # fmt: skip
    shown = json.loads(bob("auth", "whoami", "--as", "alice", "-o", "json").stdout)
    assert shown["status"]["userInfo"] == {"username": "alice", "groups": ["system:authenticated"]}
    assert bob("get", "pods", "-n", NS, "--as", "alice").returncode == 0
    carol = bob("get", "pods", "-n", NS, "--as", "carol", check=False)
    assert 'users "carol" is forbidden: User "bob" cannot impersonate' in carol.stderr
    admins = bob("get", "pods", "-n", NS, "--as", "alice", "--as-group", "admins", check=False)
    assert (
        'groups "admins" is forbidden: User "bob" cannot impersonate resource "groups" in API '
        'group "" at the cluster scope' in admins.stderr
    )


def test_impersonating_a_service_account_gives_its_groups_and_edit_allows_it_in_its_namespace(
    team_a: ApiClient, kubectl: Kubectl, kubectl_as: MakeKubectl
) -> None:
    shown = kubectl("auth", "whoami", "--as", "system:serviceaccount:team-a:runner", "-o", "json")
    assert json.loads(shown.stdout)["status"]["userInfo"] == {
        "username": "system:serviceaccount:team-a:runner",
        "groups": ["system:serviceaccounts", "system:serviceaccounts:team-a",
                   "system:authenticated"],
    }  # fmt: skip
    create(team_a, namespace("team-b"), role_binding("alice-edit", "edit", user("alice")))
    alice = kubectl_as("alice")
    as_runner = alice("auth", "whoami", "--as", "system:serviceaccount:team-a:runner")
    assert "system:serviceaccount:team-a:runner" in as_runner.stdout
    # (kubectl whoami says only "not enabled ... or you do not have permission" on a 403)
    alice("api-resources")
    refused = alice(
        "get", "pods", "-n", NS, "--as", "system:serviceaccount:team-b:default", check=False
    )
    assert (
        'serviceaccounts "default" is forbidden: User "alice" cannot impersonate resource '
        '"serviceaccounts" in API group "" in the namespace "team-b"' in refused.stderr
    )


def test_impersonated_groups_keep_or_add_system_authenticated(kubectl: Kubectl) -> None:
    def groups(*args: str) -> list[str]:
        shown = kubectl("auth", "whoami", "--as", "alice", *args, "-o", "json").stdout
        return list(json.loads(shown)["status"]["userInfo"]["groups"])

    assert groups("--as-group", "a", "--as-group", "b") == ["a", "b", "system:authenticated"]
    assert groups("--as-group", "system:authenticated") == ["system:authenticated"]
    # Only system:unauthenticated: not system:authenticated, so not even system:basic-user.
    unauthenticated = kubectl(
        "auth", "whoami", "--as", "alice", "--as-group", "system:unauthenticated", check=False
    )
    assert "you do not have permission to call it" in unauthenticated.stderr


# What admission policies see -------------------------------------------------------------------------


def user_echo_policy() -> list[dict[str, Any]]:
    """A policy refusing every ConfigMap, naming request.userInfo in its message."""
    admission = "admissionregistration.k8s.io/v1"
    return [
        {
            "apiVersion": admission,
            "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": "echo"},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {
                    "resourceRules": [
                        {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                         "resources": ["configmaps"]}
                    ]
                },
                "validations": [
                    {
                        "expression": "false",
                        "messageExpression": "'user=' + request.userInfo.username + ' groups=' "
                        "+ request.userInfo.groups.join(',') + ' uid=' + "
                        "(has(request.userInfo.uid) ? request.userInfo.uid : '-')",
                    }
                ],
            },
        },
        {
            "apiVersion": admission,
            "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": "echo"},
            "spec": {"policyName": "echo", "validationActions": ["Deny"]},
        },
    ]  # fmt: skip


def test_admission_policies_see_the_authenticated_or_impersonated_user(
    team_a: ApiClient, kubectl: Kubectl, kubectl_as: MakeKubectl
) -> None:
    create(
        team_a,
        *user_echo_policy(),
        role_binding("alice-edit", "edit", user("alice")),
        role_binding("ops-edit", "edit", group("ops")),
    )
    manifest = json.dumps(
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": NS}}
    )
    as_alice = kubectl_as("alice", ("gpu-team-a",))(
        "create", "-f", "-", stdin=manifest, check=False
    )
    assert "denied request: user=alice groups=gpu-team-a,system:authenticated uid=-" in (
        as_alice.stderr
    )
    impersonated = kubectl(
        "create", "-f", "-", "--as", "bob", "--as-group", "ops", "--as-uid", "u-1",
        stdin=manifest, check=False,
    )  # fmt: skip
    assert "denied request: user=bob groups=ops,system:authenticated uid=u-1" in (
        impersonated.stderr
    )


# Other ways of running the stand-in ---------------------------------------------------------------


def test_a_subprocess_stand_in_issues_tokens_and_kubeconfigs(tmp_path: Path) -> None:
    handle = start_in_subprocess(
        kubeconfig_path=tmp_path / "kubeconfig",
        state_dir=tmp_path / "state",
        crds_dir=None,
        extra_args=["--no-validation"],
    )
    try:
        path = handle.kubeconfig_for("alice", tmp_path / "alice", ["gpu-team-a"])
        run = make_kubectl(path, tmp_path / "cache")
        shown = json.loads(run("auth", "whoami", "-o", "json").stdout)["status"]["userInfo"]
        assert shown == {"username": "alice", "groups": ["gpu-team-a", "system:authenticated"]}
        assert "tokens.json" in {p.name for p in (tmp_path / "state").iterdir()}
        refused = run("get", "namespaces", check=False)
        assert 'User "alice" cannot list resource "namespaces"' in refused.stderr
    finally:
        handle.stop()


def test_over_https_kubectl_sends_the_users_token_and_the_admin_may_impersonate(
    tmp_path: Path,
) -> None:
    handle = start_in_thread(
        kubeconfig_path=tmp_path / "kubeconfig",
        state_dir=tmp_path / "state",
        validator=accept_everything,
        crds_dir=None,
        tls=True,
    )
    try:
        alice = make_kubectl(handle.kubeconfig_for("alice", tmp_path / "alice"), tmp_path / "cache")
        assert "alice" in alice("auth", "whoami").stdout
        assert "https://" in (tmp_path / "alice").read_text()
        admin = make_kubectl(handle.kubeconfig_path, tmp_path / "cache")
        assert "devcluster-admin" in admin("auth", "whoami").stdout
        assert admin("auth", "can-i", "create", "pods", "--as", "alice", check=False).stdout == (
            "no\n"
        )
    finally:
        handle.stop()


def test_unauthenticated_users_see_the_version_but_not_discovery(kubectl: Kubectl) -> None:
    version = kubectl("get", "--raw", "/version", "--as", "system:anonymous")
    assert json.loads(version.stdout)["gitVersion"].startswith("v1.")
    refused = kubectl("get", "--raw", "/apis", "--as", "system:anonymous", check=False)
    assert 'forbidden: User "system:anonymous" cannot get path "/apis"' in refused.stderr


# Tokens bound to a Pod (what the kubelet projects into a node agent's pod) -------------------------

AGENT_NS = "gpu-agent"
PORTAL_AUDIENCE = "gpu-quota-portal"


def node(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}}


def pod(
    name: str, node_name: str, account: str = "gpu-agent", ns: str = AGENT_NS
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "serviceAccountName": account,
            "nodeName": node_name,
            "containers": [{"name": "agent", "image": "gpu-node-agent"}],
        },
    }


@pytest.fixture
def agent_pod(admin_client: ApiClient) -> ApiClient:
    """A GPU node gpu-a with the agent's pod agent-a on it, running as gpu-agent/gpu-agent."""
    create(
        admin_client,
        namespace(AGENT_NS),
        service_account("gpu-agent", AGENT_NS),
        service_account("other", AGENT_NS),
        node("gpu-a"),
        pod("agent-a", "gpu-a"),
    )
    return admin_client


def reviewed(api: ApiClient, token: str, audiences: list[str]) -> dict[str, Any]:
    body = {"spec": {"token": token, "audiences": audiences}}
    answer: dict[str, Any] = client.AuthenticationV1Api(api).create_token_review(body=body).status
    return api.sanitize_for_serialization(answer)  # type: ignore[no-any-return]


def test_kubectl_creates_a_pod_bound_token_that_names_its_pod_and_node(
    agent_pod: ApiClient, kubectl: Kubectl
) -> None:
    token = kubectl(
        "create", "token", "gpu-agent", "-n", AGENT_NS, "--audience", PORTAL_AUDIENCE,
        "--bound-object-kind", "Pod", "--bound-object-name", "agent-a",
    ).stdout.strip()  # fmt: skip
    core = client.CoreV1Api(agent_pod)
    pod_uid = core.read_namespaced_pod("agent-a", AGENT_NS).metadata.uid
    node_uid = core.read_node("gpu-a").metadata.uid
    account_uid = core.read_namespaced_service_account("gpu-agent", AGENT_NS).metadata.uid
    status = reviewed(agent_pod, token, [PORTAL_AUDIENCE])
    assert status["authenticated"] is True
    assert status["audiences"] == [PORTAL_AUDIENCE]
    user = status["user"]
    assert user["username"] == "system:serviceaccount:gpu-agent:gpu-agent"
    assert user["uid"] == account_uid
    assert user["groups"] == [
        "system:serviceaccounts",
        "system:serviceaccounts:gpu-agent",
        "system:authenticated",
    ]
    extra = user["extra"]
    assert extra["authentication.kubernetes.io/pod-name"] == ["agent-a"]
    assert extra["authentication.kubernetes.io/pod-uid"] == [pod_uid]
    assert extra["authentication.kubernetes.io/node-name"] == ["gpu-a"]
    assert extra["authentication.kubernetes.io/node-uid"] == [node_uid]
    assert extra["authentication.kubernetes.io/credential-id"][0].startswith("JTI=")
    # Another audience, or none (the API server's own): not for them.
    assert reviewed(agent_pod, token, ["https://elsewhere"]).get("authenticated") is not True
    assert reviewed(agent_pod, token, []).get("authenticated") is not True


def test_a_bound_token_dies_with_its_pod(agent_pod: ApiClient, devcluster: Handle) -> None:
    token = devcluster.service_account_token(
        AGENT_NS, "gpu-agent", audiences=[PORTAL_AUDIENCE], pod="agent-a"
    )
    assert reviewed(agent_pod, token, [PORTAL_AUDIENCE])["authenticated"] is True
    client.CoreV1Api(agent_pod).delete_namespaced_pod("agent-a", AGENT_NS, _preload_content=False)
    status = reviewed(agent_pod, token, [PORTAL_AUDIENCE])
    assert status.get("authenticated") is not True
    assert status["error"] == "service account token has been invalidated"
    # A new pod of the same name is another pod: the old token stays dead.
    create(agent_pod, pod("agent-a", "gpu-a"))
    assert reviewed(agent_pod, token, [PORTAL_AUDIENCE]).get("authenticated") is not True


def test_an_expired_bound_token_is_not_authenticated(
    agent_pod: ApiClient, devcluster: Handle, monkeypatch: pytest.MonkeyPatch
) -> None:
    token = devcluster.service_account_token(
        AGENT_NS, "gpu-agent", audiences=[PORTAL_AUDIENCE], pod="agent-a", expiration_seconds=600
    )
    tokens = devcluster.cluster.tokens
    clock = tokens.now
    monkeypatch.setattr(tokens, "now", lambda: clock() + 601)
    status = reviewed(agent_pod, token, [PORTAL_AUDIENCE])
    assert status.get("authenticated") is not True
    assert status["error"] == "service account token has expired"


def test_a_token_is_bound_only_to_an_existing_pod_of_that_service_account(
    agent_pod: ApiClient, kubectl: Kubectl
) -> None:
    def create_token(account: str, *args: str) -> subprocess.CompletedProcess[str]:
        return kubectl(
            "create", "token", account, "-n", AGENT_NS, "--bound-object-kind", "Pod", *args,
            check=False,
        )  # fmt: skip

    missing = create_token("gpu-agent", "--bound-object-name", "nobody")
    assert 'pods "nobody" not found' in missing.stderr
    other = create_token("other", "--bound-object-name", "agent-a")
    assert (
        'cannot bind token for serviceaccount "other" to pod running with different '
        "serviceaccount name." in other.stderr
    )
    replaced = create_token(
        "gpu-agent", "--bound-object-name", "agent-a", "--bound-object-uid", "not-its-uid"
    )
    assert "the UID in the bound object reference (not-its-uid) does not match" in (replaced.stderr)
