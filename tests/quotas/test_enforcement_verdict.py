"""What the portal claims about a cluster, where people read it: the API, the cluster page and
the Django admin. Namespace split cannot bound each GPU model where models share a resource
name; trusted operators that reach beyond one namespace's ServiceAccounts open a way around
Kueue; identities that cannot be read make the claim unknown."""

from __future__ import annotations

import html
import json
import re

from rest_framework.test import APIClient

from quotas.models import Cluster, FlavorResource
from tests.factories import gpu_flavor

SHARED = (
    "2 GPU models (NVIDIA A100-SXM4-80GB, NVIDIA H100 80GB HBM3) share nvidia.com/gpu: a pod "
    "may spend the tenant's whole nvidia.com/gpu limit on either."
)
KUEUE_CONFIG = {"frameworks": ["batch/job", "pod"], "manageJobsWithoutQueueName": False}


def enforcement(api_as, world) -> dict:
    return api_as(world.alice).get("/api/v1/clusters/demo-a100/").json()["enforcement"]


def text_of(page: str) -> str:
    return html.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", page)))


def test_split_over_two_gpu_models_on_one_resource_name_says_yes_and_why(world, api_as, client):
    gpu_flavor(world.a100, "h100-80gb", gpus=8, gpu_model="NVIDIA H100 80GB HBM3")
    Cluster.objects.filter(pk=world.a100.pk).update(enforcement="split")
    said = enforcement(api_as, world)
    assert said["bypass"] == "yes"
    assert SHARED in said["explanation"]
    client.force_login(world.alice)
    page = text_of(client.get("/clusters/demo-a100/").content.decode())
    assert SHARED in page
    # Renamed by the device plugin, each model has its own quota line: bounded.
    FlavorResource.objects.filter(flavor__name="h100-80gb", resource="nvidia.com/gpu").update(
        resource="nvidia.com/h100"
    )
    assert enforcement(api_as, world)["bypass"] == "no"


def test_time_sliced_shares_on_the_whole_gpus_name_say_yes(world, api_as):
    shares = gpu_flavor(world.a100, "a100-shared", gpus=40)
    shares.time_slicing_replicas = 4
    shares.save()
    Cluster.objects.filter(pk=world.a100.pk).update(enforcement="split")
    said = enforcement(api_as, world)
    assert said["bypass"] == "yes"
    assert any(
        "and time-sliced shares (NVIDIA A100-SXM4-80GB)" in line for line in said["explanation"]
    )


def test_split_below_1_30_cannot_refuse_device_variables_so_it_is_unknown(world, api_as):
    Cluster.objects.filter(pk=world.a100.pk).update(enforcement="split", kubernetes_version="1.29")
    said = enforcement(api_as, world)
    assert said["bypass"] == "unknown"
    assert any(
        "Kubernetes 1.29 has no ValidatingAdmissionPolicy" in line for line in said["explanation"]
    )


def test_trusted_operators_in_the_kueue_verdict(world, api_as):
    Cluster.objects.filter(pk=world.a100.pk).update(
        kueue_config=KUEUE_CONFIG, trusted_controllers=["system:serviceaccount:kubeflow:*"]
    )
    said = enforcement(api_as, world)
    assert said["bypass"] == "no"
    assert any("system:serviceaccount:kubeflow:*" in line for line in said["explanation"])
    assert any(
        "system:serviceaccount:kueue-system:kueue-controller-manager" in line
        for line in said["explanation"]
    )
    # A prefix past one namespace may match people or a tenant's own accounts.
    Cluster.objects.filter(pk=world.a100.pk).update(trusted_controllers=["system:*"])
    said = enforcement(api_as, world)
    assert said["bypass"] == "yes"
    assert any(
        "The trusted operator system:* reaches beyond" in line for line in said["explanation"]
    )
    # An account in a tenant's namespace: that tenant could make owned pods.
    Cluster.objects.filter(pk=world.a100.pk).update(
        trusted_controllers=["system:serviceaccount:team-a-training:runner"]
    )
    assert enforcement(api_as, world)["bypass"] == "yes"
    # What cannot be read is not trusted, and nothing is claimed.
    Cluster.objects.filter(pk=world.a100.pk).update(trusted_controllers={"a": 1})
    said = enforcement(api_as, world)
    assert said["bypass"] == "unknown"
    assert "cannot be read" in said["explanation"][0]


# --- the Django admin --------------------------------------------------------------------------


def change_form(cluster: Cluster, **changes: object) -> dict[str, str]:
    data = {
        "name": cluster.name,
        "display_name": cluster.display_name,
        "api_server": cluster.api_server,
        "kubeconfig_path": cluster.kubeconfig_path,
        "backend": cluster.backend,
        "manifests_dir": cluster.manifests_dir,
        "kubernetes_version": cluster.kubernetes_version,
        "has_kueue": "on",
        "enforcement": cluster.enforcement,
        "trusted_controllers": "",
        "reserved_namespaces": "\n".join(cluster.reserved_namespaces),
        "kueue_config": json.dumps(cluster.kueue_config),
        "kueue_config_error": cluster.kueue_config_error,
        "elastic_cap_fraction": str(cluster.elastic_cap_fraction),
        "mig_driver": cluster.mig_driver,
        "mig_operator_namespace": cluster.mig_operator_namespace,
        "mig_operator_configmap": cluster.mig_operator_configmap,
        "mig_operator_config_key": cluster.mig_operator_config_key,
        "fair_sharing": cluster.fair_sharing,
        "usage_half_life_hours": str(cluster.usage_half_life_hours),
        "usage_sampling_minutes": str(cluster.usage_sampling_minutes),
    }
    data.update({key: str(value) for key, value in changes.items()})
    return data


def test_the_admin_warns_when_split_cannot_bound_each_model(world, client):
    gpu_flavor(world.a100, "h100-80gb", gpus=8, gpu_model="NVIDIA H100 80GB HBM3")
    client.force_login(world.admin)
    url = f"/admin/quotas/cluster/{world.a100.pk}/change/"
    response = client.post(url, change_form(world.a100, enforcement="split"), follow=True)
    assert response.status_code == 200
    words = text_of(response.content.decode())
    assert "Namespace split on demo-a100: " + SHARED.removesuffix(".") in words
    assert "Choose 'Kueue manages everything'" in words
    assert Cluster.objects.get(pk=world.a100.pk).enforcement == "split"
    # The change form says it too.
    page = text_of(client.get(url).content.decode())
    assert "Can work get around the limits?" in page and "Yes." in page


def test_the_admin_takes_trusted_operators_one_per_line_and_refuses_a_bare_star(world, client):
    client.force_login(world.admin)
    url = f"/admin/quotas/cluster/{world.a100.pk}/change/"
    lines = "system:serviceaccount:kubeflow:training-operator\n system:serviceaccount:ray:* \n"
    response = client.post(url, change_form(world.a100, trusted_controllers=lines))
    assert response.status_code == 302, text_of(response.content.decode())[:3000]
    assert Cluster.objects.get(pk=world.a100.pk).trusted_controllers == [
        "system:serviceaccount:kubeflow:training-operator",
        "system:serviceaccount:ray:*",
    ]
    assert "system:serviceaccount:ray:*" in client.get(url).content.decode()
    refused = client.post(url, change_form(world.a100, trusted_controllers="*"))
    assert refused.status_code == 200
    assert "is not a Kubernetes username" in text_of(refused.content.decode())


def test_the_admin_takes_reserved_namespaces_one_per_line_and_refuses_what_is_not_a_name(
    world, client
):
    """A platform admin reserves namespaces on a cluster in Django admin; from then on no
    tenant gets one (a 400 naming the field); a typo that is not a namespace name changes
    nothing."""
    client.force_login(world.admin)
    url = f"/admin/quotas/cluster/{world.a100.pk}/change/"
    lines = "monitoring\n  argo-* \n\nmonitoring\n"
    response = client.post(url, change_form(world.a100, reserved_namespaces=lines))
    assert response.status_code == 302, text_of(response.content.decode())[:3000]
    assert Cluster.objects.get(pk=world.a100.pk).reserved_namespaces == ["monitoring", "argo-*"]
    assert "argo-*" in client.get(url).content.decode()
    for typo in ("Monitoring", "argo*x", "*", '["json"]'):
        refused = client.post(url, change_form(world.a100, reserved_namespaces=typo))
        assert refused.status_code == 200, typo
        assert "is not a namespace name" in text_of(refused.content.decode()), typo
    assert Cluster.objects.get(pk=world.a100.pk).reserved_namespaces == ["monitoring", "argo-*"]

    api = APIClient()
    api.force_authenticate(world.admin)
    answer = api.post(
        "/api/v1/tenants/team-a/namespaces/", {"name": "argo-workflows"}, format="json"
    )
    assert answer.status_code == 400, answer.content
    assert "argo-*" in answer.json()["fields"]["name"][0]
