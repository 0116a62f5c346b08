import json
def test_explore(world, api_as, client):
    a = api_as(world.admin)
    b = api_as(world.bob)
    for c, m, url, body in [
        (b, "patch", "/api/v1/tenants/team-a/", {"display_name": "x"}),
        (b, "post", "/api/v1/tenants/team-a/namespaces/", {"name": "x"}),
        (b, "get", "/api/v1/tenants/team-a/members/alice/", None),
        (a, "get", "/api/v1/tenants/team-a/quotas/", None),
        (a, "get", "/api/v1/clusters/demo-h100/", None),
        (a, "get", "/api/v1/tier-templates/medium/", None),
        (a, "get", "/api/v1/tenants/%00/", None),
        (a, "get", "/api/v1/tenants/?search=%00", None),
        (a, "get", "/api/v1/clusters/%00/", None),
        (a, "put", "/api/v1/tenants/team-a/", {}),
        (a, "post", "/api/v1/tenants/", {"slug": "team-d", "display_name": "D", "tier": "large", "cluster": "demo-h100"}),
    ]:
        r = getattr(c, m)(url, body, format="json") if body is not None else getattr(c, m)(url)
        print(m, url, r.status_code, json.dumps(r.json(), indent=1)[:1500])
    assert 0
