"""Egress exceptions in the request form (no script needed): a lead files one through the
page, a draft edited there keeps its rules (or loses the one removed), a bad rule shows the
API's message next to its row and stores nothing, and a form posted without the rows leaves
the exceptions in force alone."""

from __future__ import annotations

from typing import Any

import pytest

from approvals.choices import RequestStatus
from approvals.models import QuotaChangeRequest
from quotas.models import QuotaSet
from tenants.models import Namespace
from tests.approvals.conftest import database_state
from tests.approvals.test_pages import NEW, VALIDATE, a100_form, input_value, slot
from tests.pages import logged_in, text

pytestmark = pytest.mark.django_db


def egress_rows(*rows: dict[str, str], blank: int = 1) -> dict[str, str]:
    """The egress rows of the form as a browser posts them, with ``blank`` empty rows."""
    data: dict[str, str] = {"egress-rows": str(len(rows) + blank)}
    for index, row in enumerate([*rows, *[{}] * blank]):
        for name in ("namespace", "tenant", "cidr", "port"):
            data[f"egress-{index}-{name}"] = row.get(name, "")
        data[f"egress-{index}-protocol"] = row.get("protocol", "TCP")
        if row.get("remove"):
            data[f"egress-{index}-remove"] = "on"
    return data


def form(**changes: Any) -> dict[str, str]:
    return a100_form(**{"reason": "model registry", **changes})


def test_the_form_shows_the_section_in_words_for_people(world):
    page = logged_in(world.alice).get(NEW)
    assert page.status_code == 200
    assert "Traffic out of the team's namespaces" in text(page)
    assert "Port" in text(page) and "Protocol" in text(page)
    assert input_value(page, "egress-0-cidr") is None  # blank rows to fill
    assert 'name="egress-rows" value="3"' in page.content.decode()


def test_a_lead_files_a_request_with_a_rule_through_the_form(world):
    theirs = Namespace.objects.filter(tenant=world.team_b).first()
    assert theirs is not None
    response = logged_in(world.alice).post(
        NEW,
        form(
            **egress_rows(
                {"cidr": "10.40.1.7/16", "port": "443"},
                {"namespace": theirs.name, "tenant": "team-b", "port": "8080", "protocol": "UDP"},
            )
        ),
    )
    assert response.status_code == 302, text(response)
    change = QuotaChangeRequest.objects.get(requester=world.alice)
    assert change.status == RequestStatus.PENDING
    assert change.egress_rules == [
        {"port": 443, "protocol": "TCP", "cidr": "10.40.0.0/16"},
        {"port": 8080, "protocol": "UDP", "namespace": theirs.name, "tenant": "team-b"},
    ]


def test_editing_a_draft_keeps_its_rules_and_removes_the_one_struck(world):
    alice = logged_in(world.alice)
    rules = ({"cidr": "10.40.0.0/16", "port": "443"}, {"cidr": "10.50.0.0/16", "port": "5432"})
    saved = alice.post(NEW, form(action="draft", **egress_rows(*rules)))
    assert saved.status_code == 302
    draft = QuotaChangeRequest.objects.get(requester=world.alice)
    assert len(draft.egress_rules) == 2

    page = alice.get(f"{NEW}&from={draft.pk}")
    assert input_value(page, "egress-0-cidr") == "10.40.0.0/16"
    assert input_value(page, "egress-1-port") == "5432"

    # Edited (another number changed), the rules as shown are kept.
    kept = alice.post(
        NEW,
        form(action="draft", replaces=str(draft.pk), max_pods="30", **egress_rows(*rules)),
    )
    assert kept.status_code == 302
    second = QuotaChangeRequest.objects.filter(requester=world.alice).latest("pk")
    assert second.egress_rules == draft.egress_rules
    assert second.max_pods == 30

    # One struck out ("Remove"), the other stays.
    removed = alice.post(
        NEW,
        form(
            action="draft",
            replaces=str(second.pk),
            **egress_rows(rules[0], {**rules[1], "remove": "on"}),
        ),
    )
    assert removed.status_code == 302
    third = QuotaChangeRequest.objects.filter(requester=world.alice).latest("pk")
    assert third.egress_rules == [{"port": 443, "protocol": "TCP", "cidr": "10.40.0.0/16"}]


def test_a_bad_network_shows_the_api_message_next_to_the_row_and_saves_nothing(world):
    before = database_state()
    response = logged_in(world.alice).post(
        NEW,
        form(
            **egress_rows(
                {"cidr": "10.40.0.0/16", "port": "443"}, {"cidr": "0.0.0.0/0", "port": "443"}
            )
        ),
    )
    assert response.status_code == 200
    assert database_state() == before
    assert "wider than a /8" in slot(response, "egress-1-cidr")
    assert slot(response, "egress-0-cidr") == ""
    assert input_value(response, "egress-1-cidr") == "0.0.0.0/0"  # what was typed stays


def test_a_port_that_is_not_a_number_is_named_like_the_api_does(world):
    response = logged_in(world.alice).post(
        NEW, form(**egress_rows({"cidr": "10.40.0.0/16", "port": "https"}))
    )
    assert response.status_code == 200
    assert slot(response, "egress-0-port") == "a port number from 1 to 65535"
    assert not QuotaChangeRequest.objects.filter(requester=world.alice).exists()


def test_add_a_row_works_without_a_script_and_stores_nothing(world):
    response = logged_in(world.alice).post(
        NEW, form(action="add-egress-row", **egress_rows({"cidr": "10.40.0.0/16", "port": "1"}))
    )
    assert response.status_code == 200
    assert 'name="egress-rows" value="3"' in response.content.decode()
    assert input_value(response, "egress-0-cidr") == "10.40.0.0/16"
    assert (
        "Traffic out of the team's namespaces: 0 exceptions → <strong>1 exception</strong>"
        in text(response)
    )
    assert not QuotaChangeRequest.objects.filter(requester=world.alice).exists()


def test_the_rules_in_force_are_shown_and_left_alone_unless_changed(world):
    QuotaSet.objects.filter(tenant=world.team_a, cluster=world.a100).update(
        egress_rules=[{"port": 443, "protocol": "TCP", "cidr": "10.40.0.0/16"}]
    )
    alice = logged_in(world.alice)
    page = alice.get(NEW)
    assert input_value(page, "egress-0-cidr") == "10.40.0.0/16"

    # Unchanged (or a post without the rows at all): the request says nothing about them.
    alice.post(NEW, form(**{"items-0-guaranteed": "8"}))
    alice.post(
        NEW,
        form(**{"items-0-guaranteed": "7"}, **egress_rows({"cidr": "10.40.0.0/16", "port": "443"})),
    )
    assert [c.egress_rules for c in QuotaChangeRequest.objects.filter(requester=world.alice)] == [
        None,
        None,
    ]

    # All struck out: the request removes them.
    alice.post(NEW, form(**egress_rows({"cidr": "10.40.0.0/16", "port": "443", "remove": "on"})))
    assert QuotaChangeRequest.objects.filter(requester=world.alice).latest("pk").egress_rules == []


def test_the_live_check_names_the_row_and_stores_nothing(world):
    before = database_state()
    answer = (
        logged_in(world.alice)
        .post(VALIDATE, form(**egress_rows({"namespace": "team-a-training", "port": "80"})))
        .json()
    )
    assert database_state() == before
    assert answer["valid"] is False
    assert list(answer["errors"]) == ["egress-0-namespace"]
    assert "own namespace" in answer["errors"]["egress-0-namespace"][0]
