def test_alice_lists_only_her_tenant(world, api_as):
    response = api_as(world.alice).get("/api/v1/tenants/")
    assert response.status_code == 200
    assert [t["slug"] for t in response.json()["results"]] == ["team-a"]
