"""The request JSON names its two generations apart: ``approved_generation`` (what the approval
wrote) and ``push.observed_generation`` (what the cluster has observed). The v1 name both once
went by, ``applied_generation``, stays on each as a deprecated alias with the same value, and
the OpenAPI document says so."""

from __future__ import annotations

from drf_spectacular.generators import SchemaGenerator

from quotas.sync import outbox_deliver
from tests.standin import approved


def test_a_request_says_what_the_approval_wrote_and_what_the_cluster_observed(
    world, standin, api_as
):
    request, row = approved(world)
    admin = api_as(world.admin)
    waiting = admin.get(f"/api/v1/quota-requests/{request.pk}/").json()
    assert waiting["approved_generation"] == request.approved_generation
    assert waiting["applied_generation"] == waiting["approved_generation"]  # the v1 alias
    listed = admin.get("/api/v1/quota-requests/").json()["results"]
    mine = next(r for r in listed if r["id"] == request.pk)
    assert mine["approved_generation"] == mine["applied_generation"] == request.approved_generation

    outbox_deliver(outbox_id=row.pk)

    done = admin.get(f"/api/v1/quota-requests/{request.pk}/").json()
    push = done["push"]
    assert push["observed_generation"] == push["applied_generation"]  # the v1 alias
    assert push["observed_generation"] >= done["approved_generation"]  # in force there
    rows = api_as(world.alice).get("/api/v1/tenants/team-a/sync/").json()
    a100 = next(r for r in rows if r["cluster"] == "demo-a100")
    assert a100["push"]["observed_generation"] == a100["push"]["applied_generation"]
    assert a100["push"]["observed_generation"] == a100["generation"]


def test_a_pending_request_has_no_approved_generation(world, api_as):
    from tests.approvals.conftest import file

    request = file(world)
    answer = api_as(world.alice).get(f"/api/v1/quota-requests/{request.pk}/").json()
    assert answer["approved_generation"] is None and answer["applied_generation"] is None


def test_the_document_marks_the_old_names_deprecated():
    schemas = SchemaGenerator().get_schema(request=None, public=True)["components"]["schemas"]
    for name, new in (
        ("QuotaRequestOutput", "approved_generation"),
        ("QuotaRequestDetailOutput", "approved_generation"),
        ("PushOutput", "observed_generation"),
    ):
        fields = schemas[name]["properties"]
        assert "deprecated" not in fields[new]
        assert fields["applied_generation"]["deprecated"] is True
        assert new in fields["applied_generation"]["description"]
