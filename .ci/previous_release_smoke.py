"""The previous release's API smoke: the reads and writes release 0.1.0 served, run by that
release's own code (its URLconf, views and models, through Django's test client) against
whatever schema the database has now. .ci/upgrade-smoke runs it from the previous release's
source tree (``git archive``), before and after ``migrate`` with main's code, and after a
rollback: a 500 (an exception in a view) stops it with the request that failed.

Written against the 0.1.0 API only: its routes, bodies and demo data (``manage.py demo``'s
users, tenants, clusters and flavors). Change it when .ci/previous-release moves to a release
whose API differs.

Usage (cwd: the previous release's source): python previous_release_smoke.py ROUND
ROUND (a short word) names the rows it writes, so it can run more than once on one database.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from typing import Any

import django

sys.path.insert(0, os.getcwd())
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
django.setup()

from django.contrib.auth import get_user_model  # noqa: E402
from django.test import Client  # noqa: E402

PASSWORD = "demo"  # noqa: S105  # manage.py demo's users
A100 = "NVIDIA A100-SXM4-80GB"
calls = 0


class SmokeFailure(Exception):
    pass


def call(
    client: Client, method: str, path: str, body: Any = None, *, expect: tuple[int, ...] = ()
) -> Any:
    """One request; a 5xx or an exception is the failure this smoke exists for, and any
    other status outside ``expect`` (default: 2xx) fails it too."""
    global calls
    calls += 1
    try:
        if body is None:
            response = getattr(client, method)(path, secure=True)
        else:
            response = getattr(client, method)(
                path, json.dumps(body), content_type="application/json", secure=True
            )
    except Exception as error:
        traceback.print_exc()
        raise SmokeFailure(
            f"{method.upper()} {path}: 500 ({type(error).__name__}: {error})"
        ) from error
    status = response.status_code
    if status >= 500 or (expect and status not in expect) or (not expect and status >= 300):
        raise SmokeFailure(f"{method.upper()} {path}: {status} {response.content[:2000]!r}")
    print(f"  {status} {method.upper()} {path}")
    if response.get("Content-Type", "").startswith("application/json") and response.content:
        return response.json()
    return None


def api_client(username: str, password: str = PASSWORD) -> Client:
    anonymous = Client()
    token = call(
        anonymous,
        "post",
        "/api/v1/auth/token/",
        {"username": username, "password": password, "name": "upgrade smoke"},
    )["token"]
    return Client(HTTP_AUTHORIZATION=f"Token {token}")


def bearer(secret: str) -> Client:
    return Client(HTTP_AUTHORIZATION=f"Bearer {secret}")


def agent_report(node: str) -> dict[str, Any]:
    instance = {
        "gi_id": 1,
        "profile": "3g.40gb",
        "start": 0,
        "size": 4,
        "ci_ids": [0],
        "memory_used_mib": 512,
        "utilization_pct": None,
        "processes": [{"pid": 4242, "used_memory_mib": 500, "pod_uid": "pod-4242"}],
    }
    return {
        "node": node,
        "sent_at": "2026-12-06T08:00:00Z",
        "agent_version": "0.1.0",
        "driver_version": "580.65.06",
        "gpus": [
            {
                "uuid": f"GPU-{node}-0000",
                "index": 0,
                "name": A100,
                "memory_total_mib": 81920,
                "memory_used_mib": 1024,
                "utilization_pct": None,
                "mig_mode_current": True,
                "mig_mode_pending": True,
                "applied_generation": 0,
                "instances": [instance],
                "processes": [],
            }
        ],
    }


def gpu_item(guaranteed: int, limit: int) -> dict[str, Any]:
    return {
        "flavor": "a100-80gb",
        "resource": "nvidia.com/gpu",
        "guaranteed": guaranteed,
        "limit": limit,
    }


def approve(admin: Client, request_id: int) -> None:
    approved = call(admin, "post", f"/api/v1/quota-requests/{request_id}/approve/")
    if approved["status"] != "approved":
        raise SmokeFailure(f"request {request_id} is {approved['status']!r} after approval")


def smoke(round_: str) -> None:
    admin = api_client("admin")
    alice = api_client("alice")

    print("reads")
    for path in (
        "/api/v1/me/",
        "/api/v1/tenants/",
        "/api/v1/tenants/team-a/",
        "/api/v1/tenants/team-a/members/",
        "/api/v1/tenants/team-a/namespaces/",
        "/api/v1/tenants/team-a/quotas/",
        "/api/v1/tenants/team-a/usage/",
        "/api/v1/tenants/team-a/profile/",
        "/api/v1/clusters/",
        "/api/v1/flavors/",
        "/api/v1/tier-templates/",
        "/api/v1/quota-requests/",
        "/api/v1/alerts/",
        "/api/v1/audit-events/",
        "/api/v1/notifications/",
        "/api/v1/nodes/",
        "/api/v1/identity-groups/",
        "/api/v1/showback/",
        "/api/v1/cluster-pools/",
        "/api/v1/flavor-prices/",
        "/api/v1/isolation-pairs/",
        "/api/v1/mig/models/",
        "/api/v1/schema/",
    ):
        call(admin, "get", path)
    call(alice, "get", "/api/v1/quota-requests/")
    call(alice, "get", "/api/v1/tenants/team-a/quotas/")

    print("users and members")
    username = f"up-{round_}"
    # A user as the previous release makes one (sign-in, createsuperuser, Django admin): every
    # column its model knows, none it does not.
    get_user_model().objects.create_user(username=username, password=PASSWORD)
    newcomer = api_client(username, PASSWORD)
    call(newcomer, "get", "/api/v1/me/")
    call(admin, "post", "/api/v1/tenants/team-a/members/", {"username": username, "role": "member"})
    call(admin, "patch", f"/api/v1/tenants/team-a/members/{username}/", {"role": "lead"})
    call(newcomer, "get", "/api/v1/tenants/team-a/members/")
    call(admin, "delete", f"/api/v1/tenants/team-a/members/{username}/")

    print("tenants")
    slug = f"up-{round_}"
    call(
        admin,
        "post",
        "/api/v1/tenants/",
        {
            "slug": slug,
            "display_name": f"Upgrade {round_}",
            "tier": "small",
            "cluster": "demo-a100",
            "leads": [username],
        },
        expect=(201,),
    )
    call(admin, "patch", f"/api/v1/tenants/{slug}/", {"description": "made by the upgrade smoke"})
    call(admin, "get", f"/api/v1/tenants/{slug}/")
    call(admin, "get", f"/api/v1/tenants/{slug}/sync/")

    print("quota requests and approvals")
    # The new tenant's lead gives its GPUs back (the next round's tenant needs the room)...
    released = call(
        newcomer,
        "post",
        "/api/v1/quota-requests/",
        {
            "tenant": slug,
            "cluster": "demo-a100",
            "reason": "upgrade smoke: room for the next round",
            "items": [gpu_item(0, 0)],
            "submit": True,
        },
        expect=(201,),
    )
    approve(admin, released["id"])
    # ...and team-a's lead moves its A100 limit between 9 and 10 (a change every round).
    quotas = call(alice, "get", "/api/v1/tenants/team-a/quotas/")["results"]
    limit = next(
        int(item["limit"])
        for quota in quotas
        if quota["cluster"] == "demo-a100"
        for item in quota["items"]
        if item["resource"] == "nvidia.com/gpu"
    )
    filed = call(
        alice,
        "post",
        "/api/v1/quota-requests/",
        {
            "tenant": "team-a",
            "cluster": "demo-a100",
            "reason": f"upgrade smoke {round_}",
            "items": [gpu_item(6, 9 if limit == 10 else 10)],
        },
        expect=(201,),
    )
    request_id = filed["id"]
    call(alice, "get", f"/api/v1/quota-requests/{request_id}/")
    call(alice, "post", f"/api/v1/quota-requests/{request_id}/submit/")
    call(admin, "get", f"/api/v1/quota-requests/{request_id}/dry-run/")
    call(admin, "get", f"/api/v1/quota-requests/{request_id}/what-if/")
    approve(admin, request_id)
    call(admin, "get", "/api/v1/quota-requests/")
    rejected = call(
        alice,
        "post",
        "/api/v1/quota-requests/",
        {
            "tenant": "team-a",
            "cluster": "demo-a100",
            "reason": f"upgrade smoke {round_}, rejected",
            "items": [gpu_item(6, 10 if limit == 10 else 9)],
            "submit": True,
        },
        expect=(201,),
    )
    call(admin, "post", f"/api/v1/quota-requests/{rejected['id']}/reject/", {"comment": "no"})
    call(alice, "get", f"/api/v1/quota-requests/{rejected['id']}/")

    print("nodes, join tokens and an agent report")
    node = f"gpu-up-{round_}"
    joined = call(
        admin,
        "post",
        "/api/v1/nodes/join-tokens/",
        {"node": node, "cluster": "demo-a100"},
        expect=(201,),
    )
    registered = call(
        Client(),
        "post",
        "/api/v1/agent/register/",
        {"join_token": joined["join_token"], "hostname": f"{node}.lab", "agent_version": "0.1.0"},
        expect=(201,),
    )
    agent = bearer(registered["node_token"])
    call(agent, "post", "/api/v1/agent/report/", agent_report(node))
    call(agent, "get", "/api/v1/agent/desired/")
    call(agent, "get", "/api/v1/agent/probes/")
    call(admin, "get", "/api/v1/nodes/")
    call(admin, "get", f"/api/v1/nodes/{node}/")


def main() -> int:
    round_ = sys.argv[1] if len(sys.argv) > 1 else "smoke"
    try:
        smoke(round_)
    except SmokeFailure as failure:
        print(f"previous release's API smoke FAILED after {calls} requests: {failure}")
        return 1
    print(f"previous release's API smoke passed: {calls} requests")
    return 0


if __name__ == "__main__":
    sys.exit(main())
