"""The one API error handler names a nested field by its path, ``items[0].guaranteed``, for
every endpoint: DRF reports a list's errors as ``{index: errors}`` (``items.0.guaranteed`` if
joined naively), and the handler, not each serializer, writes the index in brackets."""

from __future__ import annotations

import pytest
from rest_framework import serializers

from approvals.models import QuotaChangeRequest
from core.api.errors import exception_handler
from tenants.models import Membership, Notification, Tenant
from tenants.services import notify
from tests.approvals.conftest import URL, body, item
from tests.test_errors import assert_error


def test_quota_request_create_names_nested_item_fields_by_index(world, api_as):
    response = api_as(world.alice).post(
        URL,
        body(items=[item(), item(guaranteed=True), item(colour="red"), item(limit=None)]),
        format="json",
    )
    fields = assert_error(response, 400, "invalid")["fields"]
    assert fields == {
        "items[1].guaranteed": ["must be a Kubernetes quantity (text or a number)"],
        "items[2].colour": ["Unknown field: this endpoint does not accept it."],
        "items[3].limit": ["This field may not be null."],
    }
    assert "items[1].guaranteed: " in response.json()["detail"]
    assert not QuotaChangeRequest.objects.filter(requester=world.alice).exists()


def test_quota_request_validate_names_them_the_same_way(world, api_as):
    response = api_as(world.alice).post(
        f"{URL}validate/", body(items=[item(limit=["10"])]), format="json"
    )
    fields = assert_error(response, 400, "invalid")["fields"]
    assert fields == {"items[0].limit": ["must be a Kubernetes quantity (text or a number)"]}


def test_an_item_that_is_not_an_object_is_named_by_its_index(world, api_as):
    response = api_as(world.alice).post(URL, body(items=[item(), "a100"]), format="json")
    fields = assert_error(response, 400, "invalid")["fields"]
    assert list(fields) == ["items[1].non_field_errors"]  # as a top-level one is named
    assert "dictionary" in fields["items[1].non_field_errors"][0]


def test_tenant_onboarding_names_a_bad_lead_by_its_index(world, api_as):
    response = api_as(world.admin).post(
        "/api/v1/tenants/",
        {
            "slug": "team-d",
            "display_name": "Team D",
            "tier": "small",
            "cluster": "demo-h100",
            "leads": ["alice", "", ["bob"]],
        },
        format="json",
    )
    fields = assert_error(response, 400, "invalid")["fields"]
    assert set(fields) == {"leads[1]", "leads[2]"}
    assert fields["leads[1]"] == ["This field may not be blank."]
    assert not Tenant.objects.filter(slug="team-d").exists()
    assert not Membership.objects.filter(tenant__slug="team-d").exists()


def test_notifications_mark_read_names_a_bad_id_by_its_index(world, api_as):
    (notice,) = notify(users=[world.alice], subject="Quota changed")
    response = api_as(world.alice).post(
        "/api/v1/notifications/mark-read/", {"ids": [notice.pk, "x", 3.5]}, format="json"
    )
    fields = assert_error(response, 400, "invalid")["fields"]
    assert set(fields) == {"ids[1]", "ids[2]"}
    assert fields["ids[1]"] == ["A valid integer is required."]
    assert Notification.objects.get(pk=notice.pk).read_at is None


class _Row(serializers.Serializer):
    amount = serializers.IntegerField()


class _Nested(serializers.Serializer):
    rows = _Row(many=True)
    grid = serializers.ListField(child=serializers.ListField(child=serializers.IntegerField()))
    labels = serializers.DictField(child=serializers.IntegerField())


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        pytest.param({"rows": [{"amount": 1}, {"amount": "x"}]}, {"rows[1].amount"}, id="many"),
        pytest.param({"grid": [[1], [2, "x"]]}, {"grid[1][1]"}, id="list-of-lists"),
        pytest.param({"labels": {"0": "x", "gpu": 1}}, {"labels.0"}, id="dict-keys-stay-dotted"),
        pytest.param({"rows": "x"}, {"rows.non_field_errors"}, id="not-a-list"),
    ],
)
def test_the_handler_writes_list_indices_in_brackets_and_dict_keys_with_dots(data, expected):
    complete = {"rows": [], "grid": [], "labels": {}, **data}
    serializer = _Nested(data=complete)
    assert not serializer.is_valid()
    response = exception_handler(serializers.ValidationError(serializer.errors), {})
    assert response is not None
    assert response.status_code == 400
    assert set(response.data) == {"detail", "code", "fields"}
    assert set(response.data["fields"]) == expected
