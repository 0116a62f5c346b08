"""The portal's cluster-sync pages, with Django's test client against the local API stand-in
(over HTTP): the tenant page's "Clusters" section, the YAML download, "In the cluster", a
request's push state, retry and dry run, and the console's "Cluster sync" panel.

demo-a100 points at the stand-in (backend kubernetes); team-a holds 6/10 A100s there and the
request filed here asks for 8/10. A test that needs a backend on another cluster sets it.
"""

from __future__ import annotations

import json
import re
import socket
from pathlib import Path

import pytest
import yaml
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from approvals.choices import RequestStatus
from approvals.models import QuotaChangeRequest
from devcluster.runner import start_in_thread
from quotas import sync
from quotas.choices import SyncBackend
from quotas.kube.applier import RetryableError
from quotas.models import Cluster
from tenants.services import audit_record
from tests.approvals.conftest import file, item
from tests.cluster_access import hold_cluster_access
from tests.conftest import World
from tests.factories import ClusterFactory, gpu_flavor
from tests.pages import logged_in, main
from tests.standin import approved, kubectl, point_at, refuse_cluster_queues, team_a_gpu_nominal

TENANT = "/tenants/team-a/"
IN_CLUSTER = "/tenants/team-a/clusters/demo-a100/"
YAML = "/tenants/team-a/clusters/demo-a100/manifests.yaml"
CONSOLE = "/console/"


def words(html: str) -> str:
    """Text as a reader sees it: tags dropped, whitespace collapsed."""
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html)).strip()


def element(html: str, tag: str, marker: str) -> str:
    """The first ``<tag ...marker...>...</tag>`` of ``html`` (not nested in another ``tag``)."""
    match = re.search(rf"<{tag}\b[^>]*{re.escape(marker)}[^>]*>.*?</{tag}>", html, re.S)
    assert match, f"no <{tag}> with {marker}"
    return match.group(0)


def without_csrf(content: bytes) -> bytes:
    """Pages carry a CSRF token (the log-out form) masked differently in every response."""
    return re.sub(rb'name="csrfmiddlewaretoken" value="[^"]*"', b"", content)


def delivered(world: World) -> QuotaChangeRequest:
    request, row = approved(world)
    sync.outbox_deliver(outbox_id=row.pk)
    request.refresh_from_db()
    assert request.status == RequestStatus.APPLIED
    return request


def closed_port_kubeconfig(directory: Path) -> Path:
    """A kubeconfig for an API server that is not there (a port nothing listens on)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    path = directory / "unreachable-kc"
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "gone", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
        "users": [{"name": "gone", "user": {"token": "x"}}],
        "contexts": [{"name": "gone", "context": {"cluster": "gone", "user": "gone"}}],
        "current-context": "gone",
    }
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


# --- the tenant page -------------------------------------------------------------------------


@pytest.mark.parametrize("persona", ["alice", "carol", "victor", "admin"])
def test_the_tenant_page_shows_each_clusters_push_state(world, standin, persona):
    Cluster.objects.filter(pk=world.h100.pk).update(backend=SyncBackend.KUBERNETES)
    request = delivered(world)

    page = main(logged_in(getattr(world, persona)).get(TENANT))

    a100 = element(page, "tr", 'data-cluster="demo-a100"')
    assert 'data-sync="in_sync"' in a100
    generation = request.approved_generation
    assert f"generation {generation}, cluster has {generation}" in words(a100)
    assert "never" not in words(a100)  # a last-applied time instead
    assert f'href="{IN_CLUSTER}"' in a100 and f'href="{YAML}"' in a100
    assert "In the cluster" in a100 and "Download YAML" in a100
    # team-a's demo-h100 quotas (from onboarding) were never pushed.
    h100 = element(page, "tr", 'data-cluster="demo-h100"')
    assert 'data-sync="pending"' in h100 and "Not pushed yet" in words(h100)
    assert "cluster has none yet" in words(h100)


def test_a_failed_a_retrying_and_a_portal_only_cluster_read_as_such(world, standin, tmp_path):
    request, row = approved(world)
    standin.fail_next(None, 503)  # the cluster is down until cleared
    with pytest.raises(RetryableError):
        sync.outbox_deliver(outbox_id=row.pk)
    client = logged_in(world.carol)

    a100 = words(element(main(client.get(TENANT)), "tr", 'data-cluster="demo-a100"'))
    assert "Applying (attempt 2)" in a100
    assert f"generation {request.approved_generation}, cluster has none yet" in a100

    Cluster.objects.filter(pk=world.a100.pk).update(backend=SyncBackend.NONE)
    sync.outbox_deliver(outbox_id=row.pk)
    a100 = element(main(client.get(TENANT)), "tr", 'data-cluster="demo-a100"')
    assert 'data-sync="portal_only"' in a100 and "Kept in the portal only" in words(a100)
    assert "cluster has" not in words(a100)


def test_a_repaired_drift_shows_when_it_was_repaired(world, standin):
    delivered(world)
    kubectl(standin, "patch", "clusterqueue", "team-a", "--type", "merge",
            "-p", json.dumps({"spec": {"stopPolicy": "HoldAndDrain"}}))  # fmt: skip
    sync.cluster_reconcile_by_id(cluster_id=world.a100.pk)

    a100 = element(main(logged_in(world.alice).get(TENANT)), "tr", 'data-cluster="demo-a100"')

    assert 'data-sync="drifted"' in a100
    assert re.search(r"Drift repaired at \d{4}-\d\d-\d\d \d\d:\d\d UTC", words(a100))


# --- the YAML and "In the cluster" ----------------------------------------------------------


@pytest.mark.parametrize("persona", ["alice", "victor"])
def test_the_yaml_download_is_what_the_portal_owns_for_the_tenant(world, standin, persona):
    delivered(world)

    response = logged_in(getattr(world, persona)).get(YAML)

    assert response.status_code == 200
    assert response["Content-Type"].startswith("application/yaml")
    assert response["Content-Disposition"] == 'attachment; filename="team-a-demo-a100.yaml"'
    text = response.content.decode()
    assert text == sync.tenant_manifests(tenant=world.team_a, cluster=world.a100)
    objects = [o for o in yaml.safe_load_all(text) if o]
    kinds = {(o["kind"], o["metadata"]["name"]) for o in objects}
    assert ("ClusterQueue", "team-a") in kinds
    assert "team-b" not in text and "team-c" not in text


def test_the_in_cluster_page_reads_the_quotas_and_the_queue_live(world, standin):
    delivered(world)
    # Kueue's view of the queue (the stand-in runs no controllers: written as Kueue would).
    usage = [{"name": "a100-80gb", "resources": [
        {"name": "nvidia.com/gpu", "total": "9", "borrowed": "1"}]}]  # fmt: skip
    kubectl(standin, "patch", "clusterqueue", "team-a", "--subresource=status", "--type", "merge",
            "-p", json.dumps({"status": {"admittedWorkloads": 4, "pendingWorkloads": 2,
                                         "flavorsUsage": usage}}))  # fmt: skip

    response = logged_in(world.victor).get(IN_CLUSTER)

    assert response.status_code == 200
    page = main(response)
    training = element(page, "section", 'data-namespace="team-a-training"')
    gpu = words(element(training, "tr", 'data-resource="requests.nvidia.com/gpu"'))
    assert gpu == "requests.nvidia.com/gpu 10 0"  # hard, used (the stand-in runs no pods)
    inference = element(page, "section", 'data-namespace="team-a-inference"')
    assert 'data-resource="requests.nvidia.com/gpu"' in inference
    queue = element(page, "section", 'data-cluster-queue="team-a"')
    assert re.search(r"Admitted workloads 4 Pending workloads 2", words(queue))
    flavor = words(element(queue, "tr", 'data-flavor="a100-80gb"'))
    assert flavor == "a100-80gb nvidia.com/gpu 9 1"  # in use, borrowed
    assert "team-b" not in page


def test_the_in_cluster_page_shows_bytes_in_units_a_person_reads(world, standin):
    delivered(world)
    usage = [{"name": "a100-80gb", "resources": [
        {"name": "memory", "total": "609852613404", "borrowed": "0"}]}]  # fmt: skip
    kubectl(standin, "patch", "clusterqueue", "team-a", "--subresource=status", "--type", "merge",
            "-p", json.dumps({"status": {"flavorsUsage": usage}}))  # fmt: skip

    page = main(logged_in(world.alice).get(IN_CLUSTER))

    queue = element(page, "section", 'data-cluster-queue="team-a"')
    memory = words(element(queue, "tr", 'data-resource="memory"'))
    assert memory == "a100-80gb memory 568 GiB 0 B"
    training = element(page, "section", 'data-namespace="team-a-training"')
    hard = words(element(training, "tr", 'data-resource="requests.memory"'))
    assert re.fullmatch(r"requests\.memory [\d.]+ (GiB|TiB) 0 B", hard), hard
    assert "609852613404" not in page


def test_an_unreachable_or_portal_only_cluster_says_why_it_was_not_read(world, tmp_path):
    point_at(world.a100, closed_port_kubeconfig(tmp_path))
    client = logged_in(world.alice)

    response = client.get(IN_CLUSTER)

    assert response.status_code == 200
    notice = words(element(main(response), "p", "data-unreachable"))
    assert notice.startswith("The cluster was not read:")

    Cluster.objects.filter(pk=world.a100.pk).update(backend=SyncBackend.NONE)
    notice = words(element(main(client.get(IN_CLUSTER)), "p", "data-unreachable"))
    assert "backend none" in notice


@pytest.mark.parametrize("method", ["get", "post"])
def test_another_tenants_cluster_pages_answer_404(world, standin, method):
    delivered(world)
    standin.reset_stats()
    bob = logged_in(world.bob)
    for url in (IN_CLUSTER, YAML):
        response = getattr(bob, method)(url)
        assert response.status_code == 404, url
        assert "team-a" not in response.content.decode()
        missing = getattr(bob, method)(url.replace("team-a", "no-such-team"))
        assert without_csrf(missing.content) == without_csrf(response.content)
    assert standin.stats()["total"] == 0  # nothing was asked of the cluster for bob


def test_a_cluster_the_tenant_has_no_quotas_on_answers_404(world):
    ClusterFactory(name="demo-empty")
    alice = logged_in(world.alice)
    for url in (
        "/tenants/team-a/clusters/demo-empty/",
        "/tenants/team-a/clusters/demo-empty/manifests.yaml",
        "/tenants/team-a/clusters/no-such-cluster/",
    ):
        assert alice.get(url).status_code == 404, url


# --- a request's page: push state, retry, dry run ------------------------------------------


def test_a_request_shows_where_its_push_stands(world, standin):
    request, row = approved(world)
    client = logged_in(world.carol)
    url = f"/requests/{request.pk}/"

    push = words(element(main(client.get(url)), "section", "data-push="))
    assert "Approved, waiting for the push to demo-a100" in push

    standin.fail_next(None, 503)
    with pytest.raises(RetryableError):
        sync.outbox_deliver(outbox_id=row.pk)
    push = words(element(main(client.get(url)), "section", 'data-push="applying"'))
    assert re.search(r"Applying, attempt 2: .+", push), push

    standin.clear_faults()
    sync.outbox_deliver(outbox_id=row.pk)
    push = words(element(main(client.get(url)), "section", 'data-push="applied"'))
    assert f"Applied at generation {request.approved_generation}" in push
    assert "Retry push" not in push


def timeline(page: str) -> dict[str, str]:
    """The request page's timeline: action -> what the entry says."""
    section = page.split('<ol class="timeline">')[1].split("</ol>")[0]
    return {
        action: words(entry)
        for action, entry in re.findall(r'<li data-action="([^"]+)">(.*?)</li>', section, re.S)
    }


def test_the_timeline_says_the_push_is_pending_until_the_cluster_applied_it(world, standin):
    request, row = approved(world)
    client = logged_in(world.alice)
    url = f"/requests/{request.pk}/"

    said = timeline(main(client.get(url)))
    assert "Approved; pushing to demo-a100" in said["quota_request.approved"]
    assert not any("in force" in entry for entry in said.values())
    assert "quota_request.applied" not in said

    sync.outbox_deliver(outbox_id=row.pk)
    said = timeline(main(client.get(url)))
    assert "Approved; pushing to demo-a100" in said["quota_request.approved"]  # as it was then
    assert "Pushing to demo-a100" in said["quota_request.applying"]
    assert "Applied in demo-a100" in said["quota_request.applied"]


def test_the_timeline_of_a_portal_only_cluster_says_nothing_is_pushed(world):
    request, _ = approved(world)  # demo-a100 has backend none here: kept in the portal only

    said = timeline(main(logged_in(world.alice).get(f"/requests/{request.pk}/")))

    approval = said["quota_request.approved"]
    assert "Approved; demo-a100 is kept in the portal only, nothing is pushed" in approval


def test_an_approved_request_keeps_showing_what_it_changed(world, standin):
    request, row = approved(world)  # team-a's A100s 6/10 -> 8/10
    client = logged_in(world.carol)
    url = f"/requests/{request.pk}/"

    for _ in ("approved", "applied"):
        page = main(client.get(url))
        diff = element(page, "table", 'class="diff"')
        line = words(element(diff, "tr", 'data-resource="nvidia.com/gpu"'))
        assert re.search(r"6 → 8 10 → 10", line), line
        sync.outbox_deliver(outbox_id=row.pk)


def test_a_failed_push_shows_the_clusters_message_and_admins_retry_it(world, tmp_path):
    with start_in_thread(kubeconfig_path=tmp_path / "kc", validator=refuse_cluster_queues) as h:
        hold_cluster_access(h)
        point_at(world.a100, h.kubeconfig_path)
        request, row = approved(world)
        sync.outbox_deliver(outbox_id=row.pk)
    request.refresh_from_db()
    assert request.status == RequestStatus.FAILED
    url = f"/requests/{request.pk}/"
    retry = f"/requests/{request.pk}/retry/"

    alice = logged_in(world.alice)
    page = main(alice.get(url))
    push = words(element(page, "section", 'data-push="failed"'))
    assert re.search(r"Failed: .*refused by policy", push), push
    assert "Retry push" not in page and retry not in page
    assert alice.post(retry).status_code == 403
    row.refresh_from_db()
    assert row.completed_at is not None  # nothing re-opened
    assert logged_in(world.bob).post(retry).status_code == 404

    tenant_row = element(main(alice.get(TENANT)), "tr", 'data-cluster="demo-a100"')
    assert "Failed:" in words(tenant_row) and "refused by policy" in words(tenant_row)

    admin = logged_in(world.admin)
    page = main(admin.get(url))
    form = element(page, "form", f'action="{retry}"')
    assert 'name="csrfmiddlewaretoken"' in form and "Retry push" in form
    response = admin.post(retry, follow=True)
    assert response.redirect_chain[-1][0] == url
    assert "the push to demo-a100 is queued again" in main(response)
    row.refresh_from_db()
    assert row.completed_at is None  # the push goes again

    # Fixed (a cluster that accepts it): the worker delivers, the page says applied.
    with start_in_thread(kubeconfig_path=tmp_path / "kc2") as fixed:
        hold_cluster_access(fixed)
        point_at(world.a100, fixed.kubeconfig_path)
        sync.outbox_deliver(outbox_id=row.pk)
    page = main(admin.get(url))
    assert 'data-push="applied"' in page and "Retry push" not in page
    # A retry of a request that did not fail is refused with the reason, as a message.
    refused = admin.post(retry, follow=True)
    assert "was not retried" in main(refused) and "only a failed push is retried" in main(refused)


def test_the_retry_form_is_refused_without_its_csrf_token(world):
    request = file(world)
    client = Client(enforce_csrf_checks=True)
    client.force_login(world.admin)
    assert client.post(f"/requests/{request.pk}/retry/").status_code == 403


def test_a_pending_request_shows_what_the_cluster_would_see(world, standin):
    delivered(world)  # team-a at 8 / 10 in the cluster
    pending = file(world, items=[item(guaranteed=9, limit=10)])

    response = logged_in(world.alice).get(f"/requests/{pending.pk}/")

    assert response.status_code == 200
    section = element(main(response), "section", 'class="dry-run"')
    assert 'data-server="accepted"' in section
    table = element(section, "table", 'data-object="ClusterQueue team-a"')
    nominal = [
        words(row)
        for row in re.findall(r"<tr data-path=\"[^\"]*nominalQuota[^\"]*\">.*?</tr>", table, re.S)
    ]
    assert any(line.endswith(" 8 9") for line in nominal), nominal  # path, before, after
    # ...and in words first: what a person reads, not the JSON paths.
    said = words(element(section, "ul", 'class="change-words" data-object="ClusterQueue team-a"'))
    assert said == "nvidia.com/gpu on a100-80gb: guaranteed 8 → 9", said
    assert ".spec." not in words(section.split("<details>")[0])
    assert standin.stats()["total"] > 0  # the cluster was asked (a server-side dry run)
    # ...and wrote nothing: the queue still guarantees 8.
    assert team_a_gpu_nominal(standin) == "8"


def test_quotas_on_a_new_cluster_list_the_objects_they_would_create(world):
    new = ClusterFactory(name="demo-l40s")
    gpu_flavor(new, "l40s-48gb", gpus=8, gpu_model="NVIDIA L40S")
    pending = file(world, cluster=new, items=[item(flavor="l40s-48gb", guaranteed=2, limit=4)])

    response = logged_in(world.alice).get(f"/requests/{pending.pk}/")

    section = element(main(response), "section", 'class="dry-run"')
    created = words(element(section, "ul", "objects-created"))
    assert "ClusterQueue team-a" in created
    assert "ResourceQuota team-a-training/gpu-portal-quota" in created
    assert "object-diff" not in section  # nothing to change: it is all new


@pytest.mark.parametrize("backend", ["unreachable", "none"])
def test_the_dry_run_says_why_the_cluster_was_not_asked(world, tmp_path, backend):
    if backend == "none":
        Cluster.objects.filter(pk=world.a100.pk).update(backend=SyncBackend.NONE)
    else:
        point_at(world.a100, closed_port_kubeconfig(tmp_path))
    pending = file(world)

    response = logged_in(world.carol).get(f"/requests/{pending.pk}/")

    assert response.status_code == 200
    section = element(main(response), "section", 'class="dry-run"')
    verdict = words(element(section, "p", 'data-server="not-asked"'))
    assert verdict.startswith("demo-a100 was not asked:")
    assert ("backend none" if backend == "none" else "could not be asked") in verdict
    assert 'data-object="ClusterQueue team-a"' in section  # the compiler's diff all the same


def test_the_queue_does_not_ask_the_cluster(world, standin):
    file(world)
    standin.reset_stats()
    assert logged_in(world.admin).get("/console/approvals/").status_code == 200
    assert standin.stats()["total"] == 0


# --- the console's "Cluster sync" panel -----------------------------------------------------


def test_the_console_lists_counts_failures_and_drift_repairs(world, standin):
    delivered(world)
    kubectl(standin, "patch", "clusterqueue", "team-a", "--type", "json", "-p",
            json.dumps([{"op": "replace", "path": "/spec/stopPolicy", "value": "HoldAndDrain"}]))  # fmt: skip
    outcome = sync.cluster_reconcile_by_id(cluster_id=world.a100.pk)
    assert outcome is not None and not outcome.error
    Cluster.objects.filter(pk=world.h100.pk).update(
        backend=SyncBackend.KUBERNETES, kubeconfig_path="/nonexistent/kubeconfig"
    )
    world.h100.refresh_from_db()
    sync.tenant_push(tenant=world.team_b, cluster=world.h100)  # fails: no usable kubeconfig

    response = logged_in(world.admin).get(CONSOLE)

    assert response.status_code == 200
    panel = element(main(response), "section", 'id="cluster-sync"')
    a100 = element(panel, "tr", 'data-cluster="demo-a100"')
    counts = dict(re.findall(r'data-kind="(\w+)">(\d+)<', a100))
    assert counts["drifted"] == "1"  # team-a, repaired; team-b and team-c never pushed
    assert counts["pending"] == "2"
    h100 = dict(
        re.findall(r'data-kind="(\w+)">(\d+)<', element(panel, "tr", 'data-cluster="demo-h100"'))
    )
    assert (h100["failed"], h100["pending"]) == ("1", "2")

    failing = element(panel, "tr", 'data-tenant="team-b" data-cluster="demo-h100"')
    assert 'href="/tenants/team-b/#clusters"' in failing
    assert "Failed:" in words(failing) and "kubeconfig" in words(failing)

    repairs = element(panel, "table", 'class="drift-repairs"')
    assert "demo-a100: ClusterQueue team-a" in words(repairs)
    # In words: the field and its values, not ".spec.stopPolicy: HoldAndDrain → None".
    assert "New work: held, running work evicted → accepted" in words(repairs)
    assert "stopPolicy" not in words(repairs) and "HoldAndDrain" not in words(repairs)
    assert 'href="/tenants/team-a/#clusters"' in repairs


def test_the_console_is_for_platform_admins_only(world):
    assert logged_in(world.alice).get(CONSOLE).status_code == 403


def test_the_console_panel_runs_a_constant_number_of_queries(world):
    point_at(world.a100, Path("/nonexistent/kubeconfig"))  # every push fails

    def count() -> int:
        client = logged_in(world.admin)
        with CaptureQueriesContext(connection) as queries:
            response = client.get(CONSOLE)
        assert response.status_code == 200
        return len(queries)

    def repair(n: int) -> None:
        audit_record(
            actor=None,
            action="cluster.drift_repaired",
            obj=world.a100,
            tenant=world.team_a,
            object_id=f"demo-a100: ResourceQuota team-a-training/q{n}",
            before={".spec.hard.pods": str(n)},
            after={".spec.hard.pods": "20"},
        )

    sync.tenant_push(tenant=world.team_a, cluster=world.a100)
    repair(0)
    few = count()
    for tenant in (world.team_b, world.team_c):
        sync.tenant_push(tenant=tenant, cluster=world.a100)
    for n in range(1, 25):
        repair(n)
    many = count()
    assert many == few
    page = main(logged_in(world.admin).get(CONSOLE))
    assert len(re.findall(r"<tr data-event=", page)) == 20  # the 20 most recent


def test_the_in_cluster_page_says_where_each_gpu_count_comes_from_when_they_differ(world, standin):
    """Kueue holds 8 GPUs for admitted workloads while the namespaces' pods request none
    (the stand-in runs no pods; a real cluster while the pods start): the page said "GPUs in
    use 0" per namespace above the queue's "In use 8" with no word on either. Both are read
    in one visit; the page now says what each counts and, as they differ, both side by side."""
    delivered(world)
    usage = [{"name": "a100-80gb", "resources": [
        {"name": "nvidia.com/gpu", "total": "8", "borrowed": "0"}]}]  # fmt: skip
    kubectl(standin, "patch", "clusterqueue", "team-a", "--subresource=status", "--type", "merge",
            "-p", json.dumps({"status": {"admittedWorkloads": 3, "flavorsUsage": usage}}))  # fmt: skip

    page = main(logged_in(world.alice).get(IN_CLUSTER))

    queue = element(page, "section", 'data-cluster-queue="team-a"')
    assert words(element(queue, "tr", 'data-flavor="a100-80gb"')) == "a100-80gb nvidia.com/gpu 8 0"
    assert "counted from admission, before their pods start" in words(queue)
    notice = words(element(queue, "p", "data-gpu-use-differs"))
    assert re.fullmatch(
        r"Read together at \d\d:\d\d:\d\d UTC ?: Kueue holds 8 GPUs for admitted workloads, while "
        r"the pods in team-a's namespaces request 0 GPUs\. The difference is admitted work whose "
        r"pods have not started yet\.",
        notice,
    ), notice


def test_the_in_cluster_page_says_nothing_more_when_the_counts_agree(world, standin):
    delivered(world)
    page = main(logged_in(world.alice).get(IN_CLUSTER))  # no use either side
    assert "data-gpu-use-differs" not in page


def test_every_object_kubectl_shows_says_the_generation_the_page_says(world, standin):
    """Two approvals in a row: the second changes the A100 quota only, so the LimitRange,
    NetworkPolicy, LocalQueue and the rest stay as they were. They kept the first push's
    generation annotation (the applier skipped them), so kubectl said an older generation
    than the page's "cluster has". A push at a new generation now restamps them: each says
    the generation the page says, and a second pass at that generation writes nothing."""
    delivered(world)
    request, row = approved(world, guaranteed=7, limit=10)
    outcome = sync.outbox_deliver(outbox_id=row.pk)
    assert outcome is not None and outcome.ok
    generation = request.approved_generation
    assert outcome.result is not None and outcome.result.restamped  # the untouched ones
    assert not outcome.drifted  # restamping is no drift

    page = words(
        element(main(logged_in(world.alice).get(TENANT)), "tr", 'data-cluster="demo-a100"')
    )
    assert f"generation {generation}, cluster has {generation}" in page
    listed = json.loads(
        kubectl(
            standin, "get", "resourcequotas,limitranges,networkpolicies,localqueues,"
            "serviceaccounts,clusterqueues", "-A", "-l", "portal.gpu-quota.io/tenant=team-a",
            "-o", "json",
        ).stdout
    )["items"]  # fmt: skip
    stamps = {
        f"{o['kind']} {o['metadata'].get('namespace', '')}/{o['metadata']['name']}": o["metadata"][
            "annotations"
        ].get("portal.gpu-quota.io/generation")
        for o in listed
        if "portal.gpu-quota.io/generation" in (o["metadata"].get("annotations") or {})
    }
    assert any(k.startswith("LimitRange") for k in stamps), stamps
    assert set(stamps.values()) == {str(generation)}, stamps

    # A reconcile at that generation writes nothing of team-a's (the other tenants' objects,
    # never pushed here, are created by it).
    again = sync.cluster_reconcile_by_id(cluster_id=world.a100.pk)
    assert again is not None and again.result is not None and not again.drifted
    written = again.result.changed + again.result.restamped + again.result.created
    assert not [c.describe() for c in written if "team-a" in c.describe()]
