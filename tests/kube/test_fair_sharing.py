"""Fair sharing in the pure compiler and its words (``quotas.kube.fair_sharing``): what a
cluster's mode writes into every tenant's ClusterQueue (valid against Kueue v0.19.2's CRDs,
schemas and CEL rules), the Kueue Configuration an admin applies, what the portal reads back
from Kueue's ConfigMap, and the standing a team is told."""

from __future__ import annotations

import pytest
import yaml

from quotas.kube import fair_sharing
from quotas.kube.compiler import compile_cluster, compile_tenant
from quotas.kube.enforcement import KUEUE_CONFIG_KEY
from quotas.kube.fair_sharing import FairSharingSpec
from quotas.kube.validate import validate_object
from tests.kube.test_compiler import find, medium_tenant, of_kind, seed_cluster


def configmap(text: str) -> dict:
    return {"data": {KUEUE_CONFIG_KEY: text}}


def test_no_fair_sharing_leaves_the_cluster_queue_as_it_was() -> None:
    plain = find(compile_tenant(seed_cluster(), medium_tenant()), "ClusterQueue", "tenant-a")
    assert plain["spec"]["preemption"]["borrowWithinCohort"] == {"policy": "LowerPriority"}
    assert "admissionScope" not in plain["spec"]


def test_weights_drop_borrow_within_cohort_which_kueue_allows_only_without_fair_sharing() -> None:
    objects = compile_tenant(
        seed_cluster(fair_sharing="weights"), medium_tenant(fair_share_weight=3)
    )
    queue = find(objects, "ClusterQueue", "tenant-a")
    assert "borrowWithinCohort" not in queue["spec"]["preemption"]
    assert queue["spec"]["preemption"]["reclaimWithinCohort"] == "Any"
    assert queue["spec"]["fairSharing"] == {"weight": "3"}
    assert "admissionScope" not in queue["spec"]
    assert validate_object(queue) == []


def test_usage_sets_the_admission_scope_on_every_tenant_queue_and_validates() -> None:
    tenants = [medium_tenant("vision"), medium_tenant("speech", fair_share_weight=2)]
    objects = compile_cluster(seed_cluster(fair_sharing="usage"), tenants)
    queues = of_kind(objects, "ClusterQueue")
    assert {q["metadata"]["name"] for q in queues} == {"vision", "speech"}
    for queue in queues:
        assert queue["spec"]["admissionScope"] == {
            "admissionMode": "UsageBasedAdmissionFairSharing"
        }
        assert "borrowWithinCohort" not in queue["spec"]["preemption"]
    for obj in objects:
        assert validate_object(obj) == [], obj["metadata"]["name"]


def test_an_unknown_admission_mode_is_what_the_reference_crd_refuses() -> None:
    """The validator the tests lean on does catch a wrong value here (so the test above
    proves something)."""
    queue = find(
        compile_tenant(seed_cluster(fair_sharing="usage"), medium_tenant()),
        "ClusterQueue",
        "tenant-a",
    )
    queue["spec"]["admissionScope"] = {"admissionMode": "UsageBasedFairSharing"}
    assert any("admissionMode" in line for line in validate_object(queue))


def test_kueue_configuration_for_each_mode() -> None:
    assert fair_sharing.kueue_configuration(FairSharingSpec("none")) == {}
    assert fair_sharing.kueue_configuration_yaml(FairSharingSpec("none")) == ""
    assert fair_sharing.kueue_configuration(FairSharingSpec("weights")) == {
        "fairSharing": {
            "preemptionStrategies": ["LessThanOrEqualToFinalShare", "LessThanInitialShare"]
        }
    }
    document = yaml.safe_load(
        fair_sharing.kueue_configuration_yaml(FairSharingSpec("usage", 72, 10))
    )
    assert document["apiVersion"] == "config.kueue.x-k8s.io/v1beta2"
    assert document["kind"] == "Configuration"
    assert document["admissionFairSharing"] == {
        "usageHalfLifeTime": "72h",
        "usageSamplingInterval": "10m",
    }
    assert "fairSharing" in document


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("168h", 604800),
        ("1h30m", 5400),
        ("5m", 300),
        ("90s", 90),
        ("0", 0),
        ("1.5h", 5400),
        ("", None),
        ("7d", None),
        ("-1h", None),
        ("h", None),
        ("5m junk", None),
    ],
)
def test_go_durations(text: str, seconds: int | None) -> None:
    found = fair_sharing.parse_duration(text)
    assert (found if found is None else int(found)) == seconds


def test_kueue_settings_read_from_the_configmap() -> None:
    on = fair_sharing.kueue_settings(
        configmap(
            "apiVersion: config.kueue.x-k8s.io/v1beta2\nkind: Configuration\n"
            "fairSharing:\n  preemptionStrategies: [LessThanInitialShare]\n"
            "admissionFairSharing:\n  usageHalfLifeTime: 72h\n  usageSamplingInterval: 5m\n"
        ),
        KUEUE_CONFIG_KEY,
    )
    assert on["fairSharing"] is True
    assert on["admissionFairSharing"]["halfLifeSeconds"] == 72 * 3600
    off = fair_sharing.kueue_settings(configmap("kind: Configuration\n"), KUEUE_CONFIG_KEY)
    assert off["fairSharing"] is False and off["admissionFairSharing"] is None
    gated = fair_sharing.kueue_settings(
        configmap(
            "admissionFairSharing: {usageHalfLifeTime: 1h}\n"
            "featureGates: {AdmissionFairSharing: false}\n"
            "fairSharing: {enable: false}\n"
        ),
        KUEUE_CONFIG_KEY,
    )
    assert gated["admissionFairSharing"] is None and gated["gateOff"] is True
    assert gated["fairSharing"] is False  # a v1beta1 Configuration switched off


def _config(text: str) -> dict:
    return {"fairSharing": fair_sharing.kueue_settings(configmap(text), KUEUE_CONFIG_KEY)}


def test_offer_says_plainly_where_kueue_lacks_what_the_portal_asks() -> None:
    usage = FairSharingSpec("usage", 168, 5)
    missing = fair_sharing.offer(usage, has_kueue=True, config=_config("kind: Configuration\n"))
    assert missing.state == "missing"
    assert any("no fairSharing section" in line for line in missing.lines)
    assert any("no admissionFairSharing section" in line for line in missing.lines)
    differs = fair_sharing.offer(
        usage,
        has_kueue=True,
        config=_config("fairSharing: {}\nadmissionFairSharing: {usageHalfLifeTime: 72h}\n"),
    )
    assert differs.state == "differs"
    assert any("3 days" in line and "7 days" in line for line in differs.lines)
    on = fair_sharing.offer(
        usage,
        has_kueue=True,
        config=_config("fairSharing: {}\nadmissionFairSharing: {usageHalfLifeTime: 168h}\n"),
    )
    assert on.state == "on"
    no_kueue = fair_sharing.offer(usage, has_kueue=False, config=None)
    assert no_kueue.state == "missing" and "runs no Kueue" in no_kueue.lines[0]
    unread = fair_sharing.offer(
        usage, has_kueue=True, config=None, config_error="no ConfigMap kueue-system/x"
    )
    assert unread.state == "unknown" and "no ConfigMap" in unread.lines[0]
    # A Kueue configuration from before the portal read fair sharing (no key yet): unknown.
    assert (
        fair_sharing.offer(usage, has_kueue=True, config={"frameworks": ["batch/job"]}).state
        == "unknown"
    )


def test_standing_in_words() -> None:
    assert "Within its guarantee" in fair_sharing.standing_words(0)
    assert "no standing" in fair_sharing.standing_words(None)
    assert "weight of 0" in fair_sharing.standing_words(fair_sharing.MAX_SHARE)
    most = fair_sharing.standing_words(400, rank=3, borrowing=3)
    assert "weighted share 400" in most and "borrows the most of the 3 teams" in most
    assert "2nd of the 3 teams" in fair_sharing.standing_words(200, rank=2, borrowing=3)
    assert "1 GPU held" in fair_sharing.recent_use_words(1.0, half_life_hours=168)
    words = fair_sharing.recent_use_words(5.25, half_life_hours=168, rank=1, teams=2)
    assert "5.2 GPUs" in words or "5.3 GPUs" in words
    assert "7 days" in words and "The most of the 2 teams" in words
    assert "no record" in fair_sharing.recent_use_words(None, half_life_hours=24)
    assert "24 hours" in fair_sharing.recent_use_words(0.0, half_life_hours=24)


def test_consumed_total_sums_only_the_resources_asked() -> None:
    consumed = {"nvidia.com/gpu": 3.5, "cpu": 12.0, "nvidia.com/mig-1g.10gb": 2.0}
    assert fair_sharing.consumed_total(consumed, ["nvidia.com/gpu"]) == 3.5
