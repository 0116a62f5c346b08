"""The demo's stand-ins hold what a HAMi install leaves (issue 34): kube-system/hami-scheduler,
labelled with a HAMi version new enough for vGPU quotas, so the demo's vGPU flavor is usable.
Installed once, kept on restart (an admin's edit included); read back as the push reads it."""

from __future__ import annotations

from devcluster import Handle
from devcluster.demo import HAMI_VERSION, install_hami
from devcluster.kueue_sim import Endpoint
from quotas.kube import vgpu
from quotas.vgpu import hami_problem
from tests.standin import kubectl_json


def test_the_hami_scheduler_is_there_once_with_a_current_version(standin_server: Handle) -> None:
    standin_server.reset()
    endpoint = Endpoint.from_kubeconfig(standin_server.kubeconfig_path)
    install_hami(endpoint)
    install_hami(endpoint, "v2.5.0")  # a restart: what is there stays
    deployment = kubectl_json(
        standin_server, "get", "deployment", "hami-scheduler", "-n", "kube-system"
    )
    assert vgpu.hami_version_of(deployment) == HAMI_VERSION
    assert hami_problem(HAMI_VERSION) == ""
    assert deployment["metadata"]["labels"]["app.kubernetes.io/version"] == HAMI_VERSION


def test_the_version_is_read_from_the_label_else_the_image_tag() -> None:
    from devcluster.demo import hami_deployment

    deployment = hami_deployment("v2.7.1")
    assert vgpu.hami_version_of(deployment) == "v2.7.1"
    del deployment["metadata"]["labels"]["app.kubernetes.io/version"]
    assert vgpu.hami_version_of(deployment) == "v2.7.1"  # projecthami/hami:v2.7.1
    deployment["spec"]["template"]["spec"]["containers"] = [{"name": "x", "image": "mine"}]
    assert vgpu.hami_version_of(deployment) == "mine"
    assert "could not be read" in hami_problem(vgpu.hami_version_of(deployment))
    assert vgpu.hami_version_of(None) == ""
