"""The migration Job under GitOps (docs/operate/upgrades.md): a Job's pod template cannot
change in place, so each release's Job must be a new object, whichever tool applies it."""

from __future__ import annotations

import pytest

from tests.deploy.manifests import find, overlay


@pytest.mark.parametrize("name", ["in-cluster", "outside"])
def test_each_release_gets_a_new_migration_job(name: str):
    job = find(overlay(name), "Job", "portal-migrate")
    annotations = job["metadata"]["annotations"]
    # Argo CD runs it as a hook at every sync (beside the Deployments, whose new pods wait in
    # their init container), deleting the previous sync's Job first.
    assert annotations["argocd.argoproj.io/hook"] == "Sync"
    assert annotations["argocd.argoproj.io/hook-delete-policy"] == "BeforeHookCreation"
    # Flux deletes and recreates it when the new image changes its template.
    assert annotations["kustomize.toolkit.fluxcd.io/force"] == "enabled"
    # kubectl apply -k: the finished Job goes away on its own (the runbook deletes it sooner).
    assert 0 < job["spec"]["ttlSecondsAfterFinished"] <= 3600
    [container] = job["spec"]["template"]["spec"]["containers"]
    assert container["command"] == ["python", "manage.py", "migrate", "--noinput"]
