"""Storage classes and their performance (R3): a tenant may use only the storage classes
(and VolumeAttributesClasses) its quota names, enforced by the namespace ResourceQuota; the
portal reads the classes from the cluster. On the stand-in API server, as the tenant's user
with the official Python client.
"""

from __future__ import annotations

import io
import json
import re
from decimal import Decimal
from typing import Any

import pytest
from django.core.exceptions import ValidationError
from django.core.management import call_command
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from quotas.choices import FlavorKind
from quotas.kube import storage
from quotas.kube.compiler import compile_tenant
from quotas.kube.spec import ClusterSpec, FlavorSpec, NamespaceSpec, QuotaSpec, TenantSpec
from quotas.kube.validate import validate_objects
from quotas.models import Cluster, FlavorResource, ResourceFlavor
from quotas.services import QuotaItem, SchedulingQuotas, quota_set_write
from quotas.sync import cluster_reconcile, tenant_push
from tenants.models import Tenant
from tests.pages import logged_in, main
from tests.quotas.test_enforcement import kueue_configmap
from tests.quotas.test_enforcement_hostile import acting_as

GI = 1024**3
TI = 1024**4
NAMESPACE = "team-a-training"
FAST = "fast-nvme"
STANDARD = "standard"


# --- the compiler (pure) --------------------------------------------------------------------


def storage_flavor(name: str, **fields: Any) -> FlavorSpec:
    return FlavorSpec(name=name, kind="storage", capacity={"storage": Decimal(100 * TI)}, **fields)


def cluster_spec(**fields: Any) -> ClusterSpec:
    flavors = (
        FlavorSpec(name="a100", kind="gpu", capacity={"nvidia.com/gpu": Decimal(8)}),
        storage_flavor(FAST, storage_class=FAST, storage_iops=16000, volume_attributes_class=""),
        storage_flavor(STANDARD, storage_class=STANDARD),
    )
    return ClusterSpec(name="demo-a100", flavors=flavors, **fields)


def tenant_spec(*quotas: QuotaSpec) -> TenantSpec:
    return TenantSpec(
        slug="team-a",
        generation=1,
        namespaces=(NamespaceSpec(NAMESPACE),),
        quotas=(QuotaSpec("a100", "nvidia.com/gpu", Decimal(2), Decimal(4)), *quotas),
    )


def quotas_of(cluster: ClusterSpec, tenant: TenantSpec) -> dict[str, dict[str, Any]]:
    return {
        obj["metadata"]["name"]: obj["spec"]
        for obj in compile_tenant(cluster, tenant)
        if obj["kind"] == "ResourceQuota"
    }


def test_a_class_the_quota_does_not_name_gets_zero_storage_and_zero_claims() -> None:
    cluster = cluster_spec(storage_classes=(FAST, STANDARD, "scratch"))
    tenant = tenant_spec(QuotaSpec(STANDARD, "storage", Decimal(512 * GI), Decimal(TI)))
    hard = quotas_of(cluster, tenant)["gpu-portal-quota"]["hard"]
    assert hard["standard.storageclass.storage.k8s.io/requests.storage"] == "1Ti"
    assert "standard.storageclass.storage.k8s.io/persistentvolumeclaims" not in hard
    # fast-nvme (a flavor not in the quota) and scratch (read from the cluster, no flavor).
    for refused in (FAST, "scratch"):
        assert hard[f"{refused}.storageclass.storage.k8s.io/requests.storage"] == "0"
        assert hard[f"{refused}.storageclass.storage.k8s.io/persistentvolumeclaims"] == "0"


def test_a_tenant_with_no_storage_line_may_use_no_known_class_and_a_limit_of_0_names_none() -> None:
    cluster = cluster_spec()  # classes not read: the flavors' classes are still known
    hard = quotas_of(cluster, tenant_spec())["gpu-portal-quota"]["hard"]
    assert hard["fast-nvme.storageclass.storage.k8s.io/persistentvolumeclaims"] == "0"
    assert hard["standard.storageclass.storage.k8s.io/persistentvolumeclaims"] == "0"
    zero = tenant_spec(QuotaSpec(FAST, "storage", Decimal(0), Decimal(0)))
    hard = quotas_of(cluster, zero)["gpu-portal-quota"]["hard"]
    assert hard["fast-nvme.storageclass.storage.k8s.io/persistentvolumeclaims"] == "0"


def test_a_tenant_naming_no_class_keeps_the_clusters_default_one_and_only_that() -> None:
    # Upgrading from a release without per-class quotas: a tenant with a storage total and no
    # storage line keeps the class its claims without a class get; naming any class ends that.
    cluster = cluster_spec(storage_classes=(FAST, STANDARD), default_storage_class=STANDARD)
    hard = quotas_of(cluster, tenant_spec())["gpu-portal-quota"]["hard"]
    assert not any(key.startswith("standard.storageclass") for key in hard)
    assert hard["fast-nvme.storageclass.storage.k8s.io/persistentvolumeclaims"] == "0"
    named = tenant_spec(QuotaSpec(FAST, "storage", Decimal(0), Decimal(TI)))
    hard = quotas_of(cluster, named)["gpu-portal-quota"]["hard"]
    assert hard["standard.storageclass.storage.k8s.io/persistentvolumeclaims"] == "0"
    assert hard["fast-nvme.storageclass.storage.k8s.io/requests.storage"] == "1Ti"


def test_volume_attributes_classes_not_named_are_refused_by_a_scoped_quota() -> None:
    flavors = (
        storage_flavor("gold", storage_class=FAST, volume_attributes_class="gold"),
        storage_flavor("silver", storage_class=FAST, volume_attributes_class="silver"),
    )
    cluster = ClusterSpec(
        name="demo-a100",
        flavors=flavors,
        kubernetes_version="1.34",
        volume_attributes_classes=("bronze", "gold", "silver"),
    )
    tenant = TenantSpec(
        slug="team-a",
        generation=1,
        namespaces=(NamespaceSpec(NAMESPACE),),
        quotas=(QuotaSpec("silver", "storage", Decimal(0), Decimal(TI)),),
    )
    spec = quotas_of(cluster, tenant)[storage.RESOURCE_QUOTA_VOLUME_ATTRIBUTES]
    assert spec == {
        "hard": {"persistentvolumeclaims": "0"},
        "scopeSelector": {
            "matchExpressions": [
                {
                    "scopeName": "VolumeAttributesClass",
                    "operator": "In",
                    "values": ["bronze", "gold"],
                }
            ]
        },
    }
    assert validate_objects(compile_tenant(cluster, tenant), kubernetes_version="1.34") == []
    # Before 1.34 only a cluster that served them (read from it) gets the scoped quota.
    older = ClusterSpec(name="demo-a100", flavors=flavors, kubernetes_version="1.33")
    assert storage.RESOURCE_QUOTA_VOLUME_ATTRIBUTES not in quotas_of(older, tenant)


def test_the_driver_table_gives_each_driver_its_own_parameters() -> None:
    assert storage.class_parameters("ebs.csi.aws.com", 16000, 1000) == {
        "iops": "16000",
        "throughput": "1000",
    }
    assert storage.class_parameters("pd.csi.storage.gke.io", 5000, 200) == {
        "provisioned-iops-on-create": "5000",
        "provisioned-throughput-on-create": "200",
    }
    assert storage.class_parameters("disk.csi.azure.com", 5000, 100) == {
        "DiskIOPSReadWrite": "5000",
        "DiskMBpsReadWrite": "104",  # 100 MiB/s in MB/s, rounded down
    }
    ceph = storage.class_parameters("rbd.csi.ceph.com", 2000, 1)
    assert ceph["BaseReadIops"] == ceph["BaseWriteIops"] == "2000"
    assert ceph["BaseWriteBytesPerSecond"] == str(1024**2)
    # Azure takes no VolumeAttributesClass parameters; an unknown driver none at all.
    assert storage.class_parameters("disk.csi.azure.com", 1, 1, volume_attributes=True) == {}
    assert storage.class_parameters("example.com/nfs", 1, 1) == {}
    assert storage.performance_words(16000, 1000) == "16,000 IOPS, 1,000 MiB/s per volume"
    assert storage.performance_words(None, None) == ""


# --- on the stand-in, as the tenant's user --------------------------------------------------


def storage_classes_on(standin) -> None:
    """What the cluster's storage offers: the demo's two classes and one no flavor describes,
    and a VolumeAttributesClass (served at v1, Kubernetes 1.34)."""
    api = config.new_client_from_config(config_file=str(standin.kubeconfig_path))
    classes = client.StorageV1Api(api)
    for name in (FAST, STANDARD, "scratch"):
        classes.create_storage_class(
            {
                "apiVersion": "storage.k8s.io/v1",
                "kind": "StorageClass",
                "metadata": {
                    "name": name,
                    "annotations": (
                        {"storageclass.kubernetes.io/is-default-class": "true"}
                        if name == STANDARD
                        else {}
                    ),
                },
                "provisioner": "ebs.csi.aws.com",
            }
        )
    client.CustomObjectsApi(api).create_cluster_custom_object(
        "storage.k8s.io",
        "v1",
        "volumeattributesclasses",
        {
            "apiVersion": "storage.k8s.io/v1",
            "kind": "VolumeAttributesClass",
            "metadata": {"name": "iops-32k"},
            "driverName": "ebs.csi.aws.com",
            "parameters": {"iops": "32000"},
        },
    )


def flavor(cluster: Cluster, name: str, **fields: Any) -> ResourceFlavor:
    made = ResourceFlavor.objects.create(
        cluster=cluster, name=name, kind=FlavorKind.STORAGE, storage_class=name, **fields
    )
    FlavorResource.objects.create(flavor=made, resource="storage", capacity=Decimal(100 * TI))
    return made


def message(error: ApiException) -> str:
    return str(json.loads(error.body)["message"])


def claim(name: str, storage_class: str, size: str = "10Gi", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": storage_class,
            "resources": {"requests": {"storage": size}},
            **spec,
        },
    }


@pytest.fixture
def team_a_on_standard(world, standin):
    """team-a's quota on demo-a100 names standard (at most 1 TiB), not fast-nvme; the
    cluster's classes read by a full reconcile."""
    kueue_configmap(standin)
    storage_classes_on(standin)
    fast = flavor(world.a100, FAST, storage_driver="ebs.csi.aws.com", storage_iops=16000)
    standard = flavor(world.a100, STANDARD, storage_driver="ebs.csi.aws.com")
    assert fast.storage_iops == 16000
    quota_set_write(
        tenant=world.team_a,
        cluster=world.a100,
        actor=world.admin,
        items=[
            QuotaItem(world.a100_gpu, "nvidia.com/gpu", Decimal(2), Decimal(4)),
            QuotaItem(standard, "storage", Decimal(512 * GI), Decimal(TI)),
        ],
        scheduling=SchedulingQuotas(),
    )
    outcome = cluster_reconcile(cluster=world.a100)
    assert outcome.ok, outcome.message
    return standin


def test_a_claim_of_a_class_the_quota_does_not_name_is_refused_with_exceeded_quota(
    world, team_a_on_standard, tmp_path
):
    world.a100.refresh_from_db()
    assert world.a100.storage_classes == [FAST, "scratch", STANDARD]
    assert world.a100.default_storage_class == STANDARD
    assert world.a100.volume_attributes_classes == ["iops-32k"]
    core = client.CoreV1Api(acting_as(team_a_on_standard, tmp_path, "alice"))

    with pytest.raises(ApiException) as refused:
        core.create_namespaced_persistent_volume_claim(NAMESPACE, claim("fast", FAST))
    assert refused.value.status == 403
    assert message(refused.value) == (
        'persistentvolumeclaims "fast" is forbidden: exceeded quota: gpu-portal-quota, '
        "requested: fast-nvme.storageclass.storage.k8s.io/persistentvolumeclaims=1,"
        "fast-nvme.storageclass.storage.k8s.io/requests.storage=10Gi, used: "
        "fast-nvme.storageclass.storage.k8s.io/persistentvolumeclaims=0,"
        "fast-nvme.storageclass.storage.k8s.io/requests.storage=0, limited: "
        "fast-nvme.storageclass.storage.k8s.io/persistentvolumeclaims=0,"
        "fast-nvme.storageclass.storage.k8s.io/requests.storage=0"
    )
    # A class the cluster has and no flavor describes is refused the same way.
    with pytest.raises(ApiException) as refused:
        core.create_namespaced_persistent_volume_claim(NAMESPACE, claim("scratch", "scratch"))
    assert refused.value.status == 403 and "exceeded quota" in str(refused.value.body)
    # So is a VolumeAttributesClass the quota does not name, on the allowed class.
    with pytest.raises(ApiException) as refused:
        core.create_namespaced_persistent_volume_claim(
            NAMESPACE, claim("boosted", STANDARD, volumeAttributesClassName="iops-32k")
        )
    assert "exceeded quota: gpu-portal-volume-attributes" in str(refused.value.body)

    # The class it names is admitted, up to its limit.
    core.create_namespaced_persistent_volume_claim(NAMESPACE, claim("data", STANDARD, "1000Gi"))
    with pytest.raises(ApiException) as refused:
        core.create_namespaced_persistent_volume_claim(NAMESPACE, claim("more", STANDARD, "30Gi"))
    assert "exceeded quota: gpu-portal-quota" in str(refused.value.body)


def test_a_tenant_push_reads_the_classes_once_and_the_full_pass_keeps_them_current(world, standin):
    kueue_configmap(standin)
    storage_classes_on(standin)
    assert tenant_push(tenant=world.team_a, cluster=world.a100).ok
    world.a100.refresh_from_db()
    read_at = world.a100.storage_classes_read_at
    assert world.a100.storage_classes == [FAST, "scratch", STANDARD]
    quota = client.CoreV1Api(
        config.new_client_from_config(config_file=str(standin.kubeconfig_path))
    ).read_namespaced_resource_quota("gpu-portal-quota", NAMESPACE)
    assert quota.spec.hard["scratch.storageclass.storage.k8s.io/persistentvolumeclaims"] == "0"

    api = config.new_client_from_config(config_file=str(standin.kubeconfig_path))
    client.StorageV1Api(api).delete_storage_class("scratch", _preload_content=False)
    assert tenant_push(tenant=world.team_a, cluster=world.a100).ok  # read once: not again
    world.a100.refresh_from_db()
    assert world.a100.storage_classes_read_at == read_at
    assert cluster_reconcile(cluster=world.a100).ok
    world.a100.refresh_from_db()
    assert world.a100.storage_classes == [FAST, STANDARD]


# --- the pages ------------------------------------------------------------------------------


def test_the_request_form_and_the_tenant_page_show_storage_lines_with_their_performance(world):
    fast = flavor(
        world.a100, FAST, storage_iops=16000, storage_throughput_mib=1000, storage_driver="x"
    )
    flavor(world.a100, STANDARD)
    quota_set_write(
        tenant=world.team_a,
        cluster=world.a100,
        actor=world.admin,
        items=[
            QuotaItem(world.a100_gpu, "nvidia.com/gpu", Decimal(2), Decimal(4)),
            QuotaItem(fast, "storage", Decimal(512 * GI), Decimal(TI)),
        ],
        scheduling=SchedulingQuotas(),
    )
    alice = logged_in(world.alice)

    form = main(alice.get("/tenants/team-a/requests/new/?cluster=demo-a100"))
    lines = form.split('class="request-items"', 1)[1].split("</table>", 1)[0]
    rows = {
        flavor_name: words(row)
        for flavor_name, row in re.findall(
            r'<tr data-flavor="([^"]+)"[^>]*>(.*?)</tr>', lines, re.S
        )
    }
    assert rows[FAST].startswith(
        "fast-nvme 16,000 IOPS, 1,000 MiB/s per volume storage 512Gi / 1Ti"
    )
    assert rows[STANDARD].startswith("standard storage —")  # no performance set: no words
    assert "a volume claim of any other class is refused" in words(form)

    page = main(alice.get("/tenants/team-a/"))
    shown = re.search(r'data-performance="fast-nvme">([^<]*)<', page)
    assert shown is not None and shown.group(1) == "16,000 IOPS, 1,000 MiB/s per volume"
    assert "Only the storage classes listed here may be used" in words(page)


def words(html: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html)).strip()


def test_performance_belongs_to_a_storage_flavor_only(world):
    world.a100_gpu.storage_iops = 3000
    with pytest.raises(ValidationError) as refused:
        world.a100_gpu.full_clean()
    assert refused.value.message_dict["storage_iops"] == [
        "Only a storage flavor has this: leave it empty."
    ]
    fast = flavor(world.a100, FAST)
    fast.storage_iops, fast.storage_throughput_mib = 0, -1
    with pytest.raises(ValidationError) as refused:
        fast.full_clean()
    assert set(refused.value.message_dict) == {"storage_iops", "storage_throughput_mib"}


# --- the demo -------------------------------------------------------------------------------


def test_in_the_demo_team_a_is_refused_a_fast_nvme_claim_and_given_a_standard_one(
    db, standin_server, tmp_path
):
    """``manage.py demo``: team-a's quota on demo-a100 names standard, not fast-nvme (team-b's);
    pushed to the stand-in, alice's claim of fast-nvme is refused by the quota admission."""
    from tests.cluster_access import hold_cluster_access
    from tests.standin import point_at

    call_command("demo", stdout=io.StringIO())
    standin_server.reset()
    hold_cluster_access(standin_server)
    a100 = Cluster.objects.get(name="demo-a100")
    point_at(a100, standin_server.kubeconfig_path)
    assert ResourceFlavor.objects.get(cluster=a100, name=FAST).performance == (
        "16,000 IOPS, 1,000 MiB/s per volume"
    )
    kueue_configmap(standin_server)
    team_a = Tenant.objects.get(slug="team-a")
    outcome = tenant_push(tenant=team_a, cluster=a100)
    assert outcome.ok, outcome.message

    core = client.CoreV1Api(acting_as(standin_server, tmp_path, "alice"))
    with pytest.raises(ApiException) as refused:
        core.create_namespaced_persistent_volume_claim(NAMESPACE, claim("fast", FAST))
    assert message(refused.value).startswith(
        'persistentvolumeclaims "fast" is forbidden: exceeded quota: gpu-portal-quota, '
        "requested: fast-nvme.storageclass.storage.k8s.io/persistentvolumeclaims=1,"
    )
    core.create_namespaced_persistent_volume_claim(NAMESPACE, claim("data", STANDARD))


def test_the_cluster_page_says_which_storage_classes_were_read(world, team_a_on_standard):
    page = words(main(logged_in(world.admin).get("/clusters/demo-a100/")))
    assert "a tenant may use only those its quota names" in page
    assert "fast-nvme, scratch, standard; volume attributes classes iops-32k." in page
