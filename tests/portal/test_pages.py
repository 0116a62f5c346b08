"""The portal's own pages as their users meet them: "My tenants" cards (use now, firing alerts),
the 403 page (the service's words and a way back), the tenant page's suggestions for members."""

from __future__ import annotations

import re

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
