"""Writes for quotas, and the rules a quota line keeps, by concern:

* ``rules``: the items a change asks for and the checks they pass (capacity, elastic cap, MIG
  instances, time-sliced shares, per-pod caps, the inference split, departments);
* ``quota_sets``: a tenant's quota set written, generation bumped and audited in one
  transaction;
* ``tiers``: tier templates and quota sets made from them;
* ``outbox``: a change recorded for the cluster in the caller's transaction and pushed after
  commit, never lost (sweep, an admin's retry, a push again when the tenant changed);
* ``clusters``: how a cluster enforces limits and the namespaces it keeps for itself;
* ``fair_sharing``: how a cluster's Kueue shares unused GPUs (mode, half-life of recent use);
* ``holds``: new work held at 100% (R11) and allowed again (``QuotaHold`` rows, one per
  source that holds);
* ``fleet``: what the fleet pushes of a MIG flavor's capacity, per node;
* ``grants``: grants for a time on top of the standing quota, scheduled, started, withdrawn
  and ended, each step pushed and audited;
* ``vgpu`` (and ``vgpu_amounts``): GPU memory and compute of vGPU flavors (HAMi) as typed and
  read, the rules a vGPU line keeps, and a time-sliced flavor moved to vGPU shares.

The names below are the app's service interface: import them from ``quotas.services``."""

from quotas.services.clusters import (
    RESERVING_FIELDS,
    TENANT_TRAFFIC_FIELDS,
    cluster_enforcement_set,
    cluster_namespace_rules,
    cluster_namespaces_reserve,
    cluster_tenant_traffic_set,
    cluster_tenants_repush,
    cluster_update,
    tenant_traffic_namespaces_read,
)
from quotas.services.fair_sharing import (
    FAIR_SHARING_FIELDS,
    cluster_fair_sharing_set,
    cluster_fair_sharing_spec,
    fair_sharing_read,
)
from quotas.services.fleet import FleetNodeReading, fleet_node_capacity_set
from quotas.services.grants import (
    grant_schedule,
    grant_start,
    grants_confirm_ended,
    grants_notify_ending,
    grants_pushed,
    grants_start_due,
    grants_withdraw_due,
)
from quotas.services.holds import quota_set_hold
from quotas.services.outbox import (
    DELIVER_OUTBOX_TASK,
    OUTBOX_FIRST_SEND_GRACE,
    OUTBOX_RESEND_AFTER,
    enqueue_outbox,
    outbox_record,
    outbox_reopen,
    outbox_sweep,
    quota_set_repush,
    quota_sets_resync,
)
from quotas.services.person_caps import person_caps_set
from quotas.services.quota_sets import (
    cluster_lock,
    egress_rules_canonical,
    quota_set_lines,
    quota_set_lock,
    quota_set_store,
    quota_set_write,
)
from quotas.services.rules import (
    FAIR_SHARE_WEIGHT_MAX,
    POD_CAP_FIELDS,
    CapacityLine,
    ProposedLine,
    QuotaCheck,
    QuotaItem,
    SchedulingQuotas,
    amount_text,
    capacity_lines_check,
    department_check,
    elastic_cap,
    fair_share_weight_check,
    guarantees_fit,
    inference_split_check,
    limit_fits_cap,
    mig_shortfall,
    pod_caps_check,
    quota_item_parse,
    quota_items_check,
)
from quotas.services.tiers import (
    TIER_AMOUNT_FIELDS,
    TIER_COUNT_FIELDS,
    TIER_OPTIONAL_FIELDS,
    TIER_TEXT_FIELDS,
    default_gpu_flavor,
    quota_set_create_from_tier,
    tier_flavor_check,
    tier_items,
    tier_scheduling,
    tier_template_prepare,
    tier_template_save,
)
from quotas.services.vgpu import (
    ConvertedShare,
    FlavorConversion,
    cluster_hami_problem,
    flavor_vgpu_convert,
)
from quotas.services.vgpu_amounts import (
    gpumem_words,
    vgpu_amount_parse,
    vgpu_amount_words,
    vgpu_line_problems,
)

__all__ = [
    "DELIVER_OUTBOX_TASK",
    "FAIR_SHARE_WEIGHT_MAX",
    "FAIR_SHARING_FIELDS",
    "OUTBOX_FIRST_SEND_GRACE",
    "OUTBOX_RESEND_AFTER",
    "POD_CAP_FIELDS",
    "RESERVING_FIELDS",
    "TENANT_TRAFFIC_FIELDS",
    "TIER_AMOUNT_FIELDS",
    "TIER_COUNT_FIELDS",
    "TIER_OPTIONAL_FIELDS",
    "TIER_TEXT_FIELDS",
    "CapacityLine",
    "ConvertedShare",
    "FlavorConversion",
    "FleetNodeReading",
    "ProposedLine",
    "QuotaCheck",
    "QuotaItem",
    "SchedulingQuotas",
    "amount_text",
    "capacity_lines_check",
    "cluster_enforcement_set",
    "cluster_fair_sharing_set",
    "cluster_fair_sharing_spec",
    "cluster_hami_problem",
    "cluster_lock",
    "cluster_namespace_rules",
    "cluster_namespaces_reserve",
    "cluster_tenant_traffic_set",
    "cluster_tenants_repush",
    "cluster_update",
    "default_gpu_flavor",
    "department_check",
    "egress_rules_canonical",
    "elastic_cap",
    "enqueue_outbox",
    "fair_share_weight_check",
    "fair_sharing_read",
    "flavor_vgpu_convert",
    "fleet_node_capacity_set",
    "gpumem_words",
    "grant_schedule",
    "grant_start",
    "grants_confirm_ended",
    "grants_notify_ending",
    "grants_pushed",
    "grants_start_due",
    "grants_withdraw_due",
    "guarantees_fit",
    "inference_split_check",
    "limit_fits_cap",
    "mig_shortfall",
    "outbox_record",
    "outbox_reopen",
    "outbox_sweep",
    "person_caps_set",
    "pod_caps_check",
    "quota_item_parse",
    "quota_items_check",
    "quota_set_create_from_tier",
    "quota_set_hold",
    "quota_set_lines",
    "quota_set_lock",
    "quota_set_repush",
    "quota_set_store",
    "quota_set_write",
    "quota_sets_resync",
    "tenant_traffic_namespaces_read",
    "tier_flavor_check",
    "tier_items",
    "tier_scheduling",
    "tier_template_prepare",
    "tier_template_save",
    "vgpu_amount_parse",
    "vgpu_amount_words",
    "vgpu_line_problems",
]
