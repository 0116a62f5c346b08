"""The portal's own pages as their users meet them: "My tenants" cards (use now, firing alerts),
the 403 page (the service's words and a way back), the tenant page's suggestions for members."""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path

from django.conf import settings
from django.utils import timezone

from alerts.choices import AlertState
from tests.pages import fire, logged_in, main, use_now


def card(page: str, slug: str) -> str:
    found = re.search(rf'<article class="card" data-tenant="{slug}">(.*?)</article>', page, re.S)
    assert found, page
    return re.sub(r"\s+", " ", found.group(1))


def test_a_card_shows_the_use_of_each_limit_and_the_firing_alerts(world):
    use_now(world.team_a, world.a100_gpu, 8)
    use_now(world.team_b, world.a100_gpu, 1)
    fire(world.team_a, world.a100_gpu)
    fire(world.team_a, world.a100_gpu, state=AlertState.ACKNOWLEDGED)  # not firing

    page = main(logged_in(world.alice).get("/"))

    team_a = card(page, "team-a")
    assert "8 of 10 GPUs" in team_a
    assert "80% of the limit" in team_a
    assert re.search(r'<meter [^>]*max="10"[^>]*value="8"', team_a), team_a
    assert '<a href="/alerts/?tenant=team-a&state=firing">1 firing alert</a>' in team_a
    # On the H100 nothing was reported: no number is made up.
    assert "use not reported" in team_a
    assert "team-b" not in page  # alice sees her tenants only


def test_a_member_sees_her_tenants_alerts_and_an_outsider_does_not(world):
    use_now(world.team_a, world.a100_gpu, 1)
    fire(world.team_a, world.a100_gpu)
    fire(world.team_a, world.a100_gpu, state=AlertState.RESOLVED)  # not firing

    carol = card(main(logged_in(world.carol).get("/")), "team-a")
    assert "1 of 10 GPUs" in carol
    assert "1 firing alert" in carol

    bob = card(main(logged_in(world.bob).get("/")), "team-b")
    assert "No firing alerts" in bob


# --- refusals say why, and offer a way back ------------------------------------------------


def test_a_member_refused_the_request_form_reads_the_services_reason_and_a_way_back(world):
    response = logged_in(world.carol).get("/tenants/team-a/requests/new/?cluster=demo-a100")

    assert response.status_code == 403
    page = main(response)
    assert "Only a lead of team-a or a platform admin files its requests; you are a member." in page
    assert "You may not open this page" not in page
    assert '<a href="/tenants/team-a/">Back to Team A</a>' in page


def test_an_admin_only_page_says_so_and_leads_home(world):
    response = logged_in(world.alice).get("/usage/")

    assert response.status_code == 403
    page = main(response)
    assert "Platform admins only." in page
    assert '<a href="/">My tenants</a>' in page
    assert "Back to" not in page  # no tenant in this address


def test_a_refusal_links_back_only_to_a_tenant_the_caller_sees(world):
    # bob leads team-b; team-a's form is a 404 for him, and its 404 page names no way into it.
    response = logged_in(world.bob).get("/tenants/team-a/requests/new/?cluster=demo-a100")

    assert response.status_code == 404
    assert "/tenants/team-a/" not in main(response)


# --- the tenant page's suggestions: leads review and submit, members read ------------------


def suggestion_with_draft(world):  # type: ignore[no-untyped-def]
    from decimal import Decimal

    from advice.models import Suggestion
    from approvals.services import quota_request_create
    from quotas.choices import GPU_RESOURCE
    from quotas.services import QuotaItem

    draft = quota_request_create(
        tenant=world.team_a, cluster=world.a100, requester=world.alice, reason="suggested",
        items=[QuotaItem(world.a100_gpu, GPU_RESOURCE, Decimal(7), Decimal(10))],
    )  # fmt: skip
    now = timezone.now()
    Suggestion.objects.create(
        tenant=world.team_a, cluster=world.a100, request=draft,
        period_start=now - timedelta(days=30), period_end=now, created_by=world.alice,
    )  # fmt: skip
    return draft


def test_a_lead_is_offered_to_review_and_submit_the_suggested_draft(world):
    draft = suggestion_with_draft(world)

    page = main(logged_in(world.alice).get("/tenants/team-a/"))

    assert f"Review draft #{draft.pk}, its what-if replay, and submit" in page
    assert f'class="button" href="/requests/{draft.pk}/?what_if=1"' in page


def test_a_member_reads_the_suggested_draft_without_an_offer_to_submit(world):
    draft = suggestion_with_draft(world)

    page = main(logged_in(world.carol).get("/tenants/team-a/"))

    section = page.split('id="suggested-changes"')[1].split("</section>")[0]
    assert 'data-suggestion="' in section  # the numbers are hers to read
    assert "submit" not in section.lower()
    assert "Compute from last month" not in section
    assert f'href="/requests/{draft.pk}/?what_if=1">draft #{draft.pk}</a>' in section
    assert "a lead of team-a reviews it and sends it for approval" in section


# --- one look for every button, and a way from the API docs back to the portal -----------

CSS = Path(settings.BASE_DIR) / "portal" / "static" / "portal" / "portal.css"


def css_rules() -> list[tuple[set[str], str]]:
    text = re.sub(r"/\*.*?\*/", "", CSS.read_text(), flags=re.S)
    return [
        ({s.strip() for s in selectors.split(",")}, body)
        for selectors, body in re.findall(r"([^{}]+)\{([^{}]*)\}", text)
    ]


def test_every_button_and_button_link_share_one_style():
    base = [body for selectors, body in css_rules() if {"button", "a.button"} <= selectors]
    assert base, "no rule styles <button> and a.button alike"
    assert all(p in base[0] for p in ("padding", "border", "border-radius", "background", "font"))
    # What a class adds on top is a variant of that look (colours), not another size or shape.
    for selectors, body in css_rules():
        variants = {s for s in selectors if re.fullmatch(r"button\.(primary|secondary|danger)", s)}
        if variants:
            assert "padding" not in body and "font" not in body, (selectors, body)


def test_the_api_docs_lead_back_to_the_portal(world):
    response = logged_in(world.alice).get("/api/v1/docs/")

    assert response.status_code == 200
    page = response.content.decode()
    assert re.search(r'<a [^>]*href="/"[^>]*>[^<]*GPU quota portal', page), page[:2000]
    assert '<div id="swagger-ui">' in page  # Swagger UI is still there
    scripts = re.findall(r"<script([^>]*)>(.*?)</script>", page, flags=re.S)
    assert scripts and all('src="' in a and not body.strip() for a, body in scripts), scripts
    assert "script-src 'self'" in response["Content-Security-Policy"]
