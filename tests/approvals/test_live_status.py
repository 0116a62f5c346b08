"""A request's page follows its push without a reload: the status endpoint the page's script
asks (``/requests/<pk>/status/``), what it answers at each step of a push to the local API
stand-in, who may ask it (exactly who may open the page), and the page's side of it: the
script is a static file under the strict Content-Security-Policy, never inline, and without
JavaScript the page still says where the push stands, with a link to reload.

demo-a100 points at the stand-in; team-a holds 6/10 A100s and the request asks for 8/10.
"""

from __future__ import annotations

import re

import pytest
from django.test import Client

from approvals.choices import RequestStatus
from approvals.services import quota_request_reject
from quotas import sync
from quotas.kube.applier import RetryableError
from tests.approvals.conftest import file
from tests.conftest import World
from tests.factories import UserFactory
from tests.pages import logged_in, main
from tests.quotas.test_sync_pages import element, words
from tests.standin import approved

# The policy as it stands: the live updates must not have loosened it.
STRICT_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; font-src 'self' data:; connect-src 'self'; object-src 'none'; "
    "frame-ancestors 'none'; base-uri 'self'; form-action 'self'"
)


def status_url(pk: int) -> str:
    return f"/requests/{pk}/status/"


def ask(client: Client, pk: int) -> dict:  # type: ignore[type-arg]
    response = client.get(status_url(pk), HTTP_ACCEPT="application/json")
    assert response.status_code == 200, response.content[:300]
    assert response["Content-Type"] == "application/json"
    assert response["Cache-Control"] == "no-store"
    return response.json()


def test_the_status_follows_the_push_step_by_step(world: World, standin) -> None:
    request, row = approved(world)
    carol = logged_in(world.carol)  # a member of team-a: she reads the page, so the status

    waiting = ask(carol, request.pk)
    assert waiting["status"] == "approved" and waiting["final"] is False
    assert waiting["text"] == "Approved, waiting for the push to demo-a100"
    assert waiting["push"] is None  # no worker has taken it yet
    assert "Approved, waiting for the push to demo-a100" in words(waiting["fragments"]["push"])
    assert words(waiting["fragments"]["badge"]) == "Approved"
    # The page shows the same state, fingerprint and endpoint the script starts from.
    page = main(carol.get(f"/requests/{request.pk}/"))
    section = element(page, "section", "data-push=")
    assert f'data-live-url="{status_url(request.pk)}"' in section
    assert f'data-live-version="{waiting["version"]}"' in section
    assert 'data-live-final="false"' in section

    standin.fail_next(None, 503)
    with pytest.raises(RetryableError):
        sync.outbox_deliver(outbox_id=row.pk)
    applying = ask(carol, request.pk)
    assert applying["status"] == "applying" and applying["final"] is False
    assert re.fullmatch(r"Applying, attempt 2: .+", applying["text"]), applying["text"]
    assert applying["push"]["attempts"] == 1
    assert applying["version"] != waiting["version"]
    assert words(applying["fragments"]["badge"]) == "Applying"

    standin.clear_faults()
    sync.outbox_deliver(outbox_id=row.pk)
    applied = ask(carol, request.pk)
    generation = request.approved_generation
    assert applied["status"] == "applied" and applied["final"] is True
    assert applied["text"] == f"Applied at generation {generation}"
    assert f"Applied at generation {generation}" in words(applied["fragments"]["push"])
    assert 'data-live-final="true"' in applied["fragments"]["push"]
    assert "reload the page" not in applied["fragments"]["push"]
    assert applied["version"] not in (waiting["version"], applying["version"])
    assert "Applied in demo-a100" in words(applied["fragments"]["timeline"])
    assert "Applied in demo-a100" not in words(waiting["fragments"]["timeline"])
    # Asked again with nothing changed: the same fingerprint, so the page swaps nothing.
    assert ask(carol, request.pk)["version"] == applied["version"]


def test_a_draft_is_final_and_has_no_push_section(world: World) -> None:
    draft = file(world, submit=False)
    alice = logged_in(world.alice)
    answer = ask(alice, draft.pk)
    assert answer["status"] == "draft" and answer["final"] is True
    assert answer["push"] is None and set(answer["fragments"]) == {"badge"}
    page = alice.get(f"/requests/{draft.pk}/").content.decode()
    assert "live-status.js" not in page  # nothing to follow: no script at all


def test_a_pending_request_is_followed_until_it_is_decided(world: World) -> None:
    """Issue 35 item 1: an admin deciding it elsewhere moves it, so its page follows it."""
    pending = file(world)
    alice = logged_in(world.alice)
    answer = ask(alice, pending.pk)
    assert answer["status"] == "pending" and answer["final"] is False
    assert answer["push"] is None and set(answer["fragments"]) == {"badge"}
    page = alice.get(f"/requests/{pending.pk}/").content.decode()
    assert "live-status.js" in page
    assert f'data-live-url="/requests/{pending.pk}/status/"' in page
    assert 'data-live-fragment="push"' in page and 'data-live-fragment="actions"' in page
    assert 'data-live-version="{}"'.format(answer["version"]) in page

    quota_request_reject(request=pending, approver=world.admin, comment="No room.")
    rejected = ask(alice, pending.pk)
    assert rejected["status"] == "rejected" and rejected["final"] is True
    assert rejected["version"] != answer["version"]
    assert set(rejected["fragments"]) == {"badge", "actions"}
    assert "Rejected meanwhile" in words(rejected["fragments"]["actions"])


def test_a_failed_push_is_final_and_only_admins_get_the_retry_button(world: World) -> None:
    request, _ = approved(world)
    request.status = RequestStatus.FAILED
    request.failure_message = "refused by policy"
    request.save(update_fields=["status", "failure_message"])

    admin = ask(logged_in(world.admin), request.pk)
    lead = ask(logged_in(world.alice), request.pk)
    assert admin["final"] is True and lead["final"] is True
    assert admin["text"] == lead["text"] == "Failed: refused by policy"
    assert "Retry push" in admin["fragments"]["push"]
    assert "Retry push" not in lead["fragments"]["push"]


def test_who_may_ask_is_who_may_open_the_page(world: World) -> None:
    request, _ = approved(world)
    page, status = f"/requests/{request.pk}/", status_url(request.pk)
    outsider = UserFactory(username="olga")  # in no tenant
    for user, expected in (
        (world.admin, 200),
        (world.alice, 200),  # team-a's lead
        (world.carol, 200),  # team-a's member
        (world.victor, 200),  # team-a's viewer
        (world.bob, 404),  # team-b's lead: not his, and not told it exists
        (outsider, 404),
    ):
        client = logged_in(user)
        assert client.get(page).status_code == expected, user.username
        answer = client.get(status)
        assert answer.status_code == expected, user.username
        if expected == 404:
            assert b"team-a" not in answer.content
    anonymous = Client()
    for url in (page, status):
        response = anonymous.get(url)
        assert response.status_code == 302 and response["Location"].startswith("/login/")
    assert logged_in(world.alice).get(status_url(request.pk + 1000)).status_code == 404
    assert logged_in(world.alice).post(status).status_code == 405


def test_the_page_loads_the_script_as_a_file_under_the_unchanged_policy(world: World) -> None:
    request, _ = approved(world)
    client = logged_in(world.alice)
    response = client.get(f"/requests/{request.pk}/")
    assert response["Content-Security-Policy"] == STRICT_POLICY
    assert client.get(status_url(request.pk))["Content-Security-Policy"] == STRICT_POLICY
    page = response.content.decode()
    scripts = re.findall(r"<script([^>]*)>(.*?)</script>", page, flags=re.S)
    assert any("portal/live-status" in attrs for attrs, _ in scripts), scripts
    assert all('src="' in attrs and not body.strip() for attrs, body in scripts), scripts
    assert not re.search(r"<[^>]+\son[a-z]+\s*=", page), "an inline event handler"
    # Without JavaScript the page still says where the push stands, with a way to reload.
    push = element(main(response), "section", "data-push=")
    assert "Approved, waiting for the push to demo-a100" in words(push)
    assert f'<a href="/requests/{request.pk}/">reload the page</a>' in push
