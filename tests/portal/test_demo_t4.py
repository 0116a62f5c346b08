"""The demo's T4: ``manage.py demo`` shares one T4 on demo-h100 through HAMi and splits its
memory and compute 30 / 30 / 40 over three labs, each at the shared-GPU level and its share
through requests bob files and an admin approves, as the seed's example does; bob, their
lead, reads the split in GiB of GPU memory and percent of a GPU. A time-sliced T4 (clusters
without HAMi) still counts shares."""

from __future__ import annotations

import re
from decimal import Decimal
from html import unescape

import pytest

from portal.management.commands.demo import (
    DEMO_HAMI_VERSION,
    T4_FLAVOR,
    T4_LABS,
    T4_MEMORY_MIB,
    Command,
    _flavor,
)
from quotas.choices import (
    CPU_RESOURCE,
    GPU_RESOURCE,
    GPUCORES_RESOURCE,
    GPUMEM_RESOURCE,
    MEMORY_RESOURCE,
    FlavorKind,
)
from quotas.models import Quota
from tenants.choices import IsolationLevel
from tenants.models import Tenant

pytestmark = pytest.mark.django_db


MIB = 1024**2


@pytest.fixture
def t4_vgpu(world):
    world.h100.hami_version = DEMO_HAMI_VERSION
    world.h100.save(update_fields=["hami_version"])
    return _flavor(
        world.h100,
        T4_FLAVOR,
        {
            GPU_RESOURCE: Decimal(10),
            GPUMEM_RESOURCE: Decimal(T4_MEMORY_MIB * MIB),
            GPUCORES_RESOURCE: Decimal(100),
            CPU_RESOURCE: Decimal(32),
            MEMORY_RESOURCE: Decimal(128 << 30),
        },
        kind=FlavorKind.VGPU,
        gpu_model="Tesla T4",
        gpu_weight=Decimal("0.025"),
        gpu_memory_mib=T4_MEMORY_MIB,
        vgpu_split=10,
        node_labels={"nvidia.com/gpu.product": "Tesla-T4"},
    )


def test_the_demo_splits_a_t4s_memory_and_compute_30_30_40_over_three_labs(world, t4_vgpu, client):
    users = {"admin": world.admin, "bob": world.bob}
    Command._t4_labs(world.h100, t4_vgpu, users)
    Command._t4_labs(world.h100, t4_vgpu, users)  # the demo runs twice without harm
    lines = {
        (q.quota_set.tenant.slug, q.resource): (q.guaranteed, q.limit)
        for q in Quota.objects.filter(flavor=t4_vgpu).select_related("quota_set__tenant")
    }
    for slug, memory_mib, percent, vgpus in (
        ("lab-nlp", 4608, 30, 3),
        ("lab-vision", 4608, 30, 3),
        ("lab-speech", 6144, 40, 4),
    ):
        assert lines[(slug, GPUMEM_RESOURCE)] == (memory_mib * MIB, memory_mib * MIB)
        assert lines[(slug, GPUCORES_RESOURCE)] == (percent, percent)
        assert lines[(slug, GPU_RESOURCE)] == (vgpus, vgpus)
        lab = Tenant.objects.get(slug=slug)
        assert lab.isolation_level == IsolationLevel.TIME_SLICED
        # its level asked by bob and approved by an admin, its share granted by an admin
        level = lab.quota_requests.exclude(items__flavor=t4_vgpu).get()
        assert (level.requester, level.decisions.get().approver) == (world.bob, world.admin)
    client.force_login(world.bob)
    words = _words(client.get("/tenants/lab-speech/").content.decode())
    assert "6 GiB of GPU memory" in words
    assert "40% of a GPU" in words
    assert "HAMi" in words  # what a vGPU share caps, in a plain sentence
    words = _words(client.get("/tenants/lab-nlp/").content.decode())
    assert "4.5 GiB of GPU memory" in words and "30% of a GPU" in words
    home = _words(client.get("/").content.decode())
    card = home.split("lab-speech", 1)[1].split("lab-vision", 1)[0]
    assert "4 vGPUs limit" in card, card
    assert "limit 6 GiB of GPU memory, 40% of a GPU" in card
    assert "4 GPUs" not in card


@pytest.fixture
def t4(world):
    return _flavor(
        world.h100,
        "t4-shared",
        {GPU_RESOURCE: Decimal(10), CPU_RESOURCE: Decimal(32), MEMORY_RESOURCE: Decimal(128 << 30)},
        kind=FlavorKind.GPU,
        gpu_model="Tesla T4",
        time_slicing_replicas=10,
        node_labels={"nvidia.com/gpu.product": "Tesla-T4-SHARED"},
    )


def test_a_time_sliced_t4_still_splits_30_30_40_in_shares(world, t4, client):
    users = {"admin": world.admin, "bob": world.bob}
    Command._t4_labs(world.h100, t4, users)
    Command._t4_labs(world.h100, t4, users)  # the demo runs twice without harm
    shares = {
        q.quota_set.tenant.slug: (q.guaranteed, q.limit)
        for q in Quota.objects.filter(flavor=t4, resource=GPU_RESOURCE).select_related(
            "quota_set__tenant"
        )
    }
    assert shares == {
        "lab-nlp": (3, 3),
        "lab-vision": (3, 3),
        "lab-speech": (4, 4),
    }
    assert [percent for _slug, _name, percent in T4_LABS] == [30, 30, 40]
    for slug, *_ in T4_LABS:
        assert Tenant.objects.get(slug=slug).isolation_level == IsolationLevel.TIME_SLICED
    client.force_login(world.bob)
    page = client.get("/tenants/lab-speech/")
    assert page.status_code == 200
    words = re.sub(r"\s+", " ", unescape(re.sub(r"<[^>]+>", " ", page.content.decode())))
    assert "4 shares (40% of a GPU)" in words
    assert "shares a GPU's time, not its memory" in words


def _words(html: str) -> str:
    return re.sub(r"\s+", " ", unescape(re.sub(r"<[^>]+>", " ", html)))


def test_time_sliced_shares_are_called_shares_not_gpus(world, t4, client):
    from approvals.services import quota_request_create
    from quotas.services import QuotaItem
    from tests.pages import use_now

    Command._t4_labs(world.h100, t4, {"admin": world.admin, "bob": world.bob})
    speech = Tenant.objects.get(slug="lab-speech")
    use_now(speech, t4, 0)
    client.force_login(world.bob)

    home = _words(client.get("/").content.decode())
    card = home.split("lab-speech", 1)[1].split("lab-vision", 1)[0]
    assert "0 of 4 shares (40% of a GPU)" in card, card
    assert "0 of 4 GPUs" not in card

    page = _words(client.get("/tenants/lab-speech/").content.decode())
    assert "GPUs per pod at most 4 shares (40% of a GPU)" in page
    assert "at most 4 GPUs" not in page

    # The dry run of a change from 4 shares to 3 says shares, not "GPUs 4 -> 3".
    change = quota_request_create(
        tenant=speech, cluster=world.h100, requester=world.bob, reason="less",
        items=[QuotaItem(t4, GPU_RESOURCE, Decimal(3), Decimal(3))], submit=True,
    )  # fmt: skip
    dry_run = _words(client.get(f"/requests/{change.pk}/").content.decode())
    assert "GPU shares 4 shares (40% of a GPU) → 3 shares (30% of a GPU)" in dry_run, dry_run
    assert (
        "nvidia.com/gpu on t4-shared: guaranteed 4 shares (40% of a GPU) → 3 shares "
        "(30% of a GPU)" in dry_run
    )
    assert "GPUs 4 → 3" not in dry_run
