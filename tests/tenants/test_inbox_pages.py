"""The portal's inbox (/inbox/): the signed-in user's own notifications, newest first, 50 a
page, marking one or all read (POST, CSRF), and the unread count in every page's header, which
costs one COUNT query only where a page shows it and none for anonymous visitors."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.test import Client, RequestFactory
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from tenants.context_processors import inbox as inbox_context
from tenants.models import Notification, User
from tenants.services import notify
from tests.pages import logged_in, text

INBOX = "/inbox/"
READ_ALL = "/inbox/read/"


def read_url(notification: Notification) -> str:
    return f"/inbox/{notification.pk}/read/"


def listed(response: Any) -> list[int]:
    """The notification ids on the page, in the order shown."""
    return [int(pk) for pk in re.findall(r'data-notification="(\d+)"', response.content.decode())]


def badge(response: Any) -> int | None:
    """The header's unread count; None when the header shows no badge."""
    match = re.search(r'class="badge" data-unread="(\d+)"', response.content.decode())
    return int(match[1]) if match else None


def unread(user: User) -> set[int]:
    return set(Notification.objects.filter(user=user, read_at=None).values_list("pk", flat=True))


def inbox_of(user: User, count: int, *, subject: str = "Note") -> list[Notification]:
    """``count`` notifications for ``user``, oldest first, a minute apart."""
    rows = [notify(users=[user], subject=f"{subject} {i}")[0] for i in range(count)]
    start = timezone.now() - timedelta(days=1)
    for i, row in enumerate(rows):
        Notification.objects.filter(pk=row.pk).update(created_at=start + timedelta(minutes=i))
    return rows


@pytest.fixture
def notices(world: Any) -> dict[str, list[Notification]]:
    alice = inbox_of(world.alice, 3, subject="Alice's note")
    (link,) = notify(
        users=[world.alice],
        subject="Request #7 approved",
        body="Your quota is now 8 GPUs.\nApplied soon.",
        url="/requests/7/",
    )
    bob = inbox_of(world.bob, 2, subject="Bob's secret")
    return {"alice": [*alice, link], "bob": bob}


def test_alice_sees_only_her_notifications_newest_first(world, notices):
    response = logged_in(world.alice).get(INBOX)
    assert response.status_code == 200
    alice = notices["alice"]
    assert listed(response) == [alice[3].pk, alice[2].pk, alice[1].pk, alice[0].pk]
    page = text(response)
    assert "Bob's secret" not in page
    assert not set(listed(response)) & {n.pk for n in notices["bob"]}
    assert '<a href="/requests/7/">Request #7 approved</a>' in page
    assert "Your quota is now 8 GPUs.<br>Applied soon." in page
    assert page.count('class="unread"') == 4


def test_the_header_shows_the_unread_count_on_every_page(world, notices):
    alice = logged_in(world.alice)
    assert badge(alice.get(INBOX)) == 4
    assert badge(alice.get("/")) == 4
    assert badge(alice.get("/requests/")) == 4
    assert badge(logged_in(world.bob).get("/")) == 2
    assert badge(logged_in(world.carol).get("/")) is None  # nothing unread: no badge
    assert 'href="/inbox/"' in text(logged_in(world.carol).get("/"))
    Notification.objects.filter(pk=notices["alice"][0].pk).update(read_at=timezone.now())
    response = alice.get(INBOX)
    assert badge(response) == 4 - 1
    assert "<small>3 unread</small>" in text(response)


def test_marking_one_read(world, notices):
    alice = logged_in(world.alice)
    target = notices["alice"][1]
    response = alice.post(read_url(target))
    assert response.status_code == 302
    assert response["Location"] == INBOX
    assert unread(world.alice) == {n.pk for n in notices["alice"]} - {target.pk}
    page = alice.get(INBOX)
    assert badge(page) == 3
    assert re.search(rf'data-notification="{target.pk}" class="read"', page.content.decode())
    # Again: already read, still her own, nothing changes and nothing fails.
    read_at = Notification.objects.get(pk=target.pk).read_at
    assert alice.post(read_url(target)).status_code == 302
    assert Notification.objects.get(pk=target.pk).read_at == read_at


def test_marking_all_read_marks_only_her_own(world, notices):
    alice = logged_in(world.alice)
    response = alice.post(READ_ALL, follow=True)
    assert response.redirect_chain == [(INBOX, 302)]
    assert unread(world.alice) == set()
    assert unread(world.bob) == {n.pk for n in notices["bob"]}
    assert badge(response) is None
    assert "Marked 4 notifications read." in text(response)
    assert "Mark all read" not in text(response)


def test_another_users_notification_answers_404_and_stays_unread(world, notices):
    alice = logged_in(world.alice)
    theirs = notices["bob"][0]
    before = list(Notification.objects.order_by("pk").values_list("pk", "read_at"))
    mine = alice.post(read_url(theirs))
    missing = alice.post("/inbox/424242424/read/")
    huge = alice.post(f"/inbox/{2**70}/read/")
    assert mine.status_code == missing.status_code == huge.status_code == 404
    assert "Bob's secret" not in text(mine)
    assert list(Notification.objects.order_by("pk").values_list("pk", "read_at")) == before


def test_the_page_a_form_was_posted_from_is_kept(world):
    notes = inbox_of(world.alice, 60)
    alice = logged_in(world.alice)
    oldest = notes[0]  # on page 2
    assert oldest.pk in listed(alice.get(f"{INBOX}?page=2"))
    assert alice.post(read_url(oldest), {"page": "2"})["Location"] == f"{INBOX}?page=2"
    assert alice.post(read_url(oldest), {"page": "1"})["Location"] == INBOX
    assert alice.post(read_url(oldest), {"page": "//evil.example"})["Location"] == INBOX
    assert alice.post(READ_ALL, {"page": "2"})["Location"] == f"{INBOX}?page=2"
    for odd in ("³", "٣", "9" * 5000):  # not ASCII digits, or too many: the first page
        assert alice.post(READ_ALL, {"page": odd})["Location"] == INBOX


def test_pages_of_50_newest_first(world):
    notes = inbox_of(world.alice, 60)
    alice = logged_in(world.alice)
    newest_first = [n.pk for n in reversed(notes)]
    first = alice.get(INBOX)
    assert listed(first) == newest_first[:50]
    assert "Page 1 of 2" in text(first)
    assert listed(alice.get(f"{INBOX}?page=2")) == newest_first[50:]
    assert listed(alice.get(f"{INBOX}?page=99")) == newest_first[50:]  # the last page
    assert listed(alice.get(f"{INBOX}?page=x")) == newest_first[:50]


def test_anonymous_visitors_are_sent_to_log_in(world, notices):
    client = Client()
    for method, url in (
        ("get", INBOX),
        ("post", READ_ALL),
        ("post", read_url(notices["alice"][0])),
    ):
        response = getattr(client, method)(url)
        assert response.status_code == 302, url
        assert response["Location"] == f"/login/?next={url}"
    assert unread(world.alice) == {n.pk for n in notices["alice"]}


def test_reading_is_get_only_and_marking_post_only(world, notices):
    alice = logged_in(world.alice)
    assert alice.post(INBOX).status_code == 405
    assert alice.get(READ_ALL).status_code == 405
    assert alice.get(read_url(notices["alice"][0])).status_code == 405
    assert unread(world.alice) == {n.pk for n in notices["alice"]}


def test_marking_read_needs_the_csrf_token(world, notices):
    alice = logged_in(world.alice, csrf=True)
    target = notices["alice"][0]
    assert alice.post(READ_ALL).status_code == 403
    assert alice.post(read_url(target)).status_code == 403
    assert unread(world.alice) == {n.pk for n in notices["alice"]}

    page = alice.get(INBOX)  # sets the CSRF cookie; the forms carry the token
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.content.decode())[1]
    assert alice.post(read_url(target), {"csrfmiddlewaretoken": token}).status_code == 302
    assert target.pk not in unread(world.alice)
    assert alice.post(READ_ALL, {"csrfmiddlewaretoken": token}).status_code == 302
    assert unread(world.alice) == set()


def _inbox_queries(client: Client, url: str = INBOX) -> list[str]:
    with CaptureQueriesContext(connection) as context:
        response = client.get(url)
    assert response.status_code == 200
    return [q["sql"] for q in context.captured_queries]


def test_the_inbox_runs_a_constant_number_of_queries(world):
    alice = logged_in(world.alice)
    inbox_of(world.alice, 2)
    few = len(_inbox_queries(alice))
    inbox_of(world.alice, 58)
    inbox_of(world.bob, 10)
    assert len(_inbox_queries(alice)) == few
    assert len(_inbox_queries(alice, f"{INBOX}?page=2")) == few
    assert few <= 5  # session, user, page count, page, unread count


def test_the_header_count_is_one_query_for_members_and_none_for_anonymous(world):
    inbox_of(world.alice, 3)

    def counts(sqls: list[str]) -> int:
        return sum(1 for sql in sqls if "tenants_notification" in sql)

    assert counts(_inbox_queries(logged_in(world.alice), "/")) == 1
    assert counts(_inbox_queries(Client(), "/login/")) == 0


def test_the_count_is_read_lazily_and_once(world, django_assert_num_queries):
    inbox_of(world.alice, 3)
    request = RequestFactory().get("/")
    request.user = world.alice
    with django_assert_num_queries(0):
        context = inbox_context(request)
    with django_assert_num_queries(1):
        assert context["inbox_unread_count"] == 3
        assert str(context["inbox_unread_count"]) == "3"


def test_a_stale_link_after_leaving_a_team_is_not_offered(world):
    """carol was added to team-a, then removed: her inbox still shows "You were added to team-a"
    in full, but no longer links to team-a's page (a bare 404 there), and says why; a link to
    a tenant she still sees stays a link."""
    from tenants.services import team_member_add, team_member_remove
    from tests.factories import UserFactory

    dave = UserFactory(username="dave")
    team_member_add(tenant=world.team_a, username="dave", role="member", actor=world.alice)
    team_member_remove(tenant=world.team_a, username="dave", actor=world.alice)
    (still,) = notify(users=[world.carol], subject="team-a news", url="/tenants/team-a/")

    page = text(logged_in(dave).get(INBOX))
    assert "You were added to team-a as a member" in page
    assert 'href="/tenants/team-a/"' not in page
    assert "You no longer have access to team-a." in page
    assert logged_in(dave).get("/tenants/team-a/").status_code == 404  # nothing leaks there

    carol_page = text(logged_in(world.carol).get(INBOX))
    assert 'href="/tenants/team-a/"' in carol_page and "no longer have access" not in carol_page
    assert still.pk in listed(logged_in(world.carol).get(INBOX))


def test_stale_links_to_a_request_or_an_alert_are_not_offered(world):
    """A request's and an alert's notification about team-a, read by someone who left team-a:
    the text stays, the link to a 404 goes; alice (still a lead) keeps both links."""
    from tests.approvals.conftest import file
    from tests.factories import UserFactory
    from tests.pages import fire

    request = file(world)
    alert = fire(world.team_a, world.a100_gpu)
    gone = UserFactory(username="erin")
    paths = [f"/alerts/{alert.pk}/", f"/requests/{request.pk}/"]
    for path in paths:
        notify(users=[gone, world.alice], subject=f"About {path}", url=path)

    page = text(logged_in(gone).get(INBOX))
    for path in paths:
        assert f"About {path}" in page and f'href="{path}"' not in page
        assert logged_in(gone).get(path).status_code == 404
    assert "You no longer have access to this page." in page
    alice_page = text(logged_in(world.alice).get(INBOX))
    assert all(f'href="{path}"' in alice_page for path in paths)
