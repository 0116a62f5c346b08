"""Fair sharing on a cluster: what the portal asks of Kueue, what Kueue there offers, and each
tenant's standing in words.

Kueue has two mechanisms (reference: Kueue v0.19.2 CRDs and Configuration API ``v1beta2``):

* **Fair sharing by weight** (preemption-based, since v0.7). With a ``fairSharing`` section in
  Kueue's manager Configuration, the unused quota of a cohort goes to the ClusterQueue (team)
  with the lowest *weighted share*: its use above its guarantee (nominal quota), over what the
  cohort can lend, divided by its ``fairSharing.weight``. Kueue reports it in the
  ClusterQueue's ``status.fairSharing.weightedShare`` (0: within its guarantee). It has no
  memory: a team that borrowed all week is level again the moment its work ends.
* **Admission fair sharing** (usage-based; feature gate ``AdmissionFairSharing``, alpha in
  v0.12, beta and on by default from v0.15). With an ``admissionFairSharing`` section in the
  Configuration (``usageHalfLifeTime``, ``usageSamplingInterval``, ``resourceWeights``) and
  ``spec.admissionScope.admissionMode: UsageBasedAdmissionFairSharing`` on a ClusterQueue,
  Kueue keeps, per LocalQueue, a decayed record of what it used
  (``status.fairSharing.admissionFairSharingStatus.consumedResources``, older use counting half
  after each half-life) and admits first from the LocalQueues that used least. Its scope is one
  ClusterQueue: in the portal, the namespaces (and queues) of one team. Between teams Kueue
  still compares only the weighted share of what each borrows now (upstream asks for more:
  kubernetes-sigs/kueue#9734).

The portal does not own Kueue's Configuration (the cluster's operators do): it compiles the
queues' side (``cluster_queue_spec``), renders the Configuration fragment an admin applies
(``kueue_configuration``), reads back what Kueue runs with (``kueue_settings`` from the
ConfigMap the portal already reads) and says whether the two agree (``offer``).

Pure: data in, dicts and words out.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any, Final

import yaml

__all__ = [
    "ADMISSION_MODE",
    "HALF_LIFE_HOURS_MAX",
    "HALF_LIFE_HOURS_MIN",
    "MAX_SHARE",
    "MODES",
    "MODE_NONE",
    "MODE_USAGE",
    "MODE_WEIGHTS",
    "PREEMPTION_STRATEGIES",
    "SAMPLING_MINUTES_MAX",
    "SAMPLING_MINUTES_MIN",
    "FairSharingSpec",
    "Offer",
    "cluster_queue_spec",
    "consumed_total",
    "duration_text",
    "kueue_configuration",
    "kueue_configuration_yaml",
    "kueue_settings",
    "offer",
    "parse_duration",
    "recent_use_words",
    "standing_words",
]

MODE_NONE: Final = "none"
MODE_WEIGHTS: Final = "weights"
MODE_USAGE: Final = "usage"
MODES: Final = (MODE_NONE, MODE_WEIGHTS, MODE_USAGE)

ADMISSION_MODE: Final = "UsageBasedAdmissionFairSharing"
# Kueue's default order of preemption strategies (required in the v1beta2 Configuration).
PREEMPTION_STRATEGIES: Final = ("LessThanOrEqualToFinalShare", "LessThanInitialShare")
CONFIG_API: Final = "config.kueue.x-k8s.io/v1beta2"
FEATURE_GATE: Final = "AdmissionFairSharing"

# What the portal accepts: an hour to 90 days of half-life (Kueue takes 0, which forgets at
# once: no memory, the point of the mode); sampling from every minute to every hour.
HALF_LIFE_HOURS_MIN: Final = 1
HALF_LIFE_HOURS_MAX: Final = 90 * 24
SAMPLING_MINUTES_MIN: Final = 1
SAMPLING_MINUTES_MAX: Final = 60

# weightedShare of a ClusterQueue of weight 0 that borrows (Kueue: the largest int64).
MAX_SHARE: Final = 9223372036854775807


@dataclass(frozen=True)
class FairSharingSpec:
    """A cluster's fair-sharing settings in the portal."""

    mode: str = MODE_NONE
    half_life_hours: int = 168
    sampling_minutes: int = 5

    @property
    def by_weight(self) -> bool:
        return self.mode in (MODE_WEIGHTS, MODE_USAGE)

    @property
    def by_usage(self) -> bool:
        return self.mode == MODE_USAGE


# --- the queues ------------------------------------------------------------------------------


def cluster_queue_spec(spec: Mapping[str, Any], mode: str) -> dict[str, Any]:
    """A tenant's ClusterQueue ``spec`` as ``mode`` wants it (a new dict; ``spec`` is left as it
    is): with fair sharing, without ``preemption.borrowWithinCohort`` (Kueue: "May only be
    configured with Classical Preemption, and not with Fair Sharing"); usage-based, with the
    admission scope that makes Kueue order the team's LocalQueues by their recent use."""
    result = copy.deepcopy(dict(spec))
    if mode in (MODE_WEIGHTS, MODE_USAGE):
        preemption = result.get("preemption")
        if isinstance(preemption, dict):
            preemption.pop("borrowWithinCohort", None)
    if mode == MODE_USAGE:
        result["admissionScope"] = {"admissionMode": ADMISSION_MODE}
    return result


# --- Kueue's configuration -------------------------------------------------------------------


def duration_text(seconds: int) -> str:
    """A Go duration as Kueue writes it back: ``168h``, ``5m``, ``1h30m``."""
    hours, rest = divmod(int(seconds), 3600)
    minutes, secs = divmod(rest, 60)
    text = (f"{hours}h" if hours else "") + (f"{minutes}m" if minutes else "")
    text += f"{secs}s" if secs or not text else ""
    return text


_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")
_UNIT_SECONDS: Final = {
    "ns": Decimal("1e-9"),
    "us": Decimal("1e-6"),
    "µs": Decimal("1e-6"),
    "ms": Decimal("0.001"),
    "s": Decimal(1),
    "m": Decimal(60),
    "h": Decimal(3600),
}


def parse_duration(value: Any) -> Decimal | None:
    """Seconds of a Go duration (``168h``, ``1h30m``, ``90s``, ``0``); None when it is not one."""
    if not isinstance(value, str):
        return None
    text = value.strip()
    if text in ("0", "+0", "-0"):
        return Decimal(0)
    if not text or text.startswith("-"):
        return None
    text = text.lstrip("+")
    total = Decimal(0)
    position = 0
    for match in _DURATION_PART.finditer(text):
        if match.start() != position:
            return None
        try:
            total += Decimal(match.group(1)) * _UNIT_SECONDS[match.group(2)]
        except InvalidOperation:
            return None
        position = match.end()
    return total if position == len(text) and position else None


def kueue_configuration(fair: FairSharingSpec) -> dict[str, Any]:
    """The part of Kueue's manager Configuration ``fair`` needs (an admin merges it into the
    ``kueue-manager-config`` ConfigMap and restarts Kueue); {} for no fair sharing."""
    fragment: dict[str, Any] = {}
    if fair.by_weight:
        fragment["fairSharing"] = {"preemptionStrategies": list(PREEMPTION_STRATEGIES)}
    if fair.by_usage:
        fragment["admissionFairSharing"] = {
            "usageHalfLifeTime": duration_text(fair.half_life_hours * 3600),
            "usageSamplingInterval": duration_text(fair.sampling_minutes * 60),
        }
    return fragment


def kueue_configuration_yaml(fair: FairSharingSpec) -> str:
    fragment = kueue_configuration(fair)
    if not fragment:
        return ""
    document = {"apiVersion": CONFIG_API, "kind": "Configuration", **fragment}
    return yaml.safe_dump(document, sort_keys=False, default_flow_style=False)


def kueue_settings(configmap: Mapping[str, Any], key: str) -> dict[str, Any]:
    """What Kueue's Configuration (the ConfigMap's ``key``, already known to be a YAML
    mapping) says of fair sharing: whether ``fairSharing`` is there, and the
    ``admissionFairSharing`` settings (None: absent, or its feature gate turned off in the
    Configuration's ``featureGates``)."""
    try:
        document = yaml.safe_load((configmap.get("data") or {}).get(key) or "")
    except yaml.YAMLError:
        document = None
    if not isinstance(document, dict):
        return {"fairSharing": False, "admissionFairSharing": None}
    gates = document.get("featureGates")
    gate_off = isinstance(gates, dict) and gates.get(FEATURE_GATE) is False
    admission = document.get("admissionFairSharing")
    settings: dict[str, Any] | None = None
    if isinstance(admission, dict) and not gate_off:
        half_life = parse_duration(admission.get("usageHalfLifeTime"))
        sampling = parse_duration(admission.get("usageSamplingInterval") or "5m")
        settings = {
            "usageHalfLifeTime": str(admission.get("usageHalfLifeTime") or ""),
            "usageSamplingInterval": str(admission.get("usageSamplingInterval") or "5m"),
            "halfLifeSeconds": float(half_life) if half_life is not None else None,
            "samplingSeconds": float(sampling) if sampling is not None else None,
        }
    fair = document.get("fairSharing")
    # v1beta1 Configurations switch it on with ``enable: true``; v1beta2 by being there.
    on = isinstance(fair, dict) and fair.get("enable", True) is not False
    return {"fairSharing": on, "admissionFairSharing": settings, "gateOff": gate_off}


def _days_or_hours(seconds: float) -> str:
    hours = seconds / 3600
    if hours >= 48 and hours % 24 == 0:
        days = int(hours // 24)
        return f"{days} days"
    if hours == int(hours):
        return f"{int(hours)} hour{'s' if int(hours) != 1 else ''}"
    return f"{hours:.1f} hours"


@dataclass(frozen=True)
class Offer:
    """Whether the cluster's Kueue does what the portal asks: ``state`` is "on" (it does),
    "off" (the portal asks for nothing), "missing" (Kueue's configuration lacks it), "differs"
    (on, with other settings) or "unknown" (the configuration could not be read)."""

    state: str
    lines: tuple[str, ...]


def offer(
    fair: FairSharingSpec,
    *,
    has_kueue: bool,
    config: Mapping[str, Any] | None,
    config_error: str = "",
) -> Offer:
    """Words for the cluster page: what the portal asks and what Kueue offers."""
    if not has_kueue:
        return Offer(
            "missing",
            (
                "This cluster runs no Kueue: nothing shares unused GPUs fairly here, and the "
                "portal keeps no record of teams' recent use on it.",
            ),
        )
    settings = (config or {}).get("fairSharing") if config is not None else None
    if config is None or not isinstance(settings, dict):
        why = config_error or "it has not been read yet"
        if fair.mode == MODE_NONE:
            return Offer("off", ("The portal asks for no fair sharing on this cluster.",))
        return Offer(
            "unknown",
            (
                f"Whether Kueue on this cluster shares fairly is unknown: its configuration "
                f"could not be read ({why}).",
            ),
        )
    weights_on = bool(settings.get("fairSharing"))
    usage = settings.get("admissionFairSharing")
    if fair.mode == MODE_NONE:
        lines = [
            "The portal asks for no fair sharing on this cluster: a team borrows unused GPUs "
            "first come, first served, and gives them back when their owner needs them."
        ]
        if weights_on or usage:
            lines.append(
                "Kueue's configuration has fair sharing on all the same: its weights apply, "
                "but the portal shows no standing."
            )
        return Offer("off", tuple(lines))
    lines = []
    state = "on"
    if weights_on:
        lines.append(
            "Kueue shares unused GPUs by weight: the team borrowing least for its weight goes "
            "first, and the one borrowing most gives back first."
        )
    else:
        state = "missing"
        lines.append(
            "Kueue's configuration has no fairSharing section: the teams' weights do nothing "
            "until an admin applies the configuration below."
        )
    if fair.by_usage:
        if settings.get("gateOff"):
            state = "missing"
            lines.append(
                "Kueue's configuration turns the AdmissionFairSharing feature gate off: it "
                "keeps no record of recent use."
            )
        elif not isinstance(usage, dict):
            state = "missing"
            lines.append(
                "Kueue's configuration has no admissionFairSharing section: it keeps no record "
                "of recent use until an admin applies the configuration below."
            )
        else:
            wanted = fair.half_life_hours * 3600
            running = usage.get("halfLifeSeconds")
            if running is None or abs(float(running) - wanted) > 0.5:
                state = "differs" if state == "on" else state
                shown = (
                    _days_or_hours(float(running))
                    if running is not None
                    else repr(usage.get("usageHalfLifeTime"))
                )
                lines.append(
                    f"Kueue remembers use with a half-life of {shown}; the portal asks for "
                    f"{_days_or_hours(wanted)}: apply the configuration below."
                )
            else:
                lines.append(
                    f"Kueue remembers each queue's use, older use counting half after "
                    f"{_days_or_hours(wanted)}, and admits first from the queues of a team "
                    "that used least."
                )
    return Offer(state, tuple(lines))


# --- standing --------------------------------------------------------------------------------


def consumed_total(consumed: Mapping[str, Any], resources: Sequence[str]) -> float:
    """The sum of ``consumed`` (resource -> amount) over ``resources``."""
    total = 0.0
    for name in resources:
        value = consumed.get(name)
        if isinstance(value, (int, float)):
            total += float(value)
    return total


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def standing_words(share: int | None, *, rank: int = 0, borrowing: int = 0) -> str:
    """A team's standing when teams compete for unused GPUs, from Kueue's weighted share:
    ``rank`` among the ``borrowing`` teams of the cluster (1: borrows the least for its
    weight)."""
    if share is None:
        return "Kueue reports no standing for this team here (its fair sharing is off)."
    if share == 0:
        return (
            "Within its guarantee: when teams compete for unused GPUs, its waiting work goes "
            "ahead of every team that is borrowing."
        )
    if share >= MAX_SHARE:
        return (
            "Borrowing with a weight of 0: it always comes last for unused GPUs and is the "
            "first to give them back."
        )
    where = ""
    if borrowing > 1 and rank:
        if rank == borrowing:
            where = f" It borrows the most of the {borrowing} teams borrowing now for its weight:"
            where += " it is the first to give GPUs back."
        elif rank == 1:
            where = f" It borrows the least of the {borrowing} teams borrowing now for its weight."
        else:
            where = f" It is {_ordinal(rank)} of the {borrowing} teams borrowing now."
    return (
        f"Borrowing above its guarantee (weighted share {share}): teams with a lower share get "
        f"unused GPUs first.{where}"
    )


def recent_use_words(
    gpus: float | None, *, half_life_hours: int, rank: int = 0, teams: int = 0
) -> str:
    """A team's recent GPU use as Kueue remembers it (the sum of its LocalQueues' decayed
    ``consumedResources``); None: Kueue keeps no record here."""
    if gpus is None:
        return "Kueue keeps no record of this team's recent use here."
    half = _days_or_hours(half_life_hours * 3600)
    amount = f"{gpus:.1f}".rstrip("0").rstrip(".") if gpus else "0"
    unit = "GPU" if amount == "1" else "GPUs"
    where = ""
    if teams > 1 and rank:
        where = (
            f" The most of the {teams} teams here."
            if rank == 1
            else f" {_ordinal(rank)} of {teams} teams here."
        )
    return (
        f"Recent use: {amount} {unit} held on average, older use counting half after {half}.{where}"
    )
