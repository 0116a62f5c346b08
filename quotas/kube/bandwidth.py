"""R27: an optional cap on the bandwidth of each pod of a tenant.

Kubernetes shapes a pod's traffic from two annotations the CNI ``bandwidth`` plugin reads,
``kubernetes.io/ingress-bandwidth`` and ``kubernetes.io/egress-bandwidth`` (quantities of bits
per second, "10M"); nothing in Kubernetes caps what a pod may ask for. So the compiler labels
each namespace of a capped tenant with its cap (``LABEL_POD_BANDWIDTH_MAX``), and one
cluster-wide ValidatingAdmissionPolicy refuses, in a namespace with that label, a pod created
without both annotations or with either above the label's value or under 1k (a quantity
may be negative; the CEL quantity library compares them). A pod keeps what it was admitted
with: the cap holds new pods.

Pure: no Django, no app; the approvals app checks a requested cap with ``pod_bandwidth_text``.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any, Final

from quotas.kube.enforcement import (
    POLICY_MIN_VERSION,
    cel_quoted,
    kubernetes_minor,
    policy_pair,
)
from quotas.kube.spec import LABEL_MANAGED_BY, MANAGED_BY
from quotas.quantity import QuantityError, canonical, parse_quantity

__all__ = [
    "ANNOTATION_EGRESS",
    "ANNOTATION_INGRESS",
    "LABEL_POD_BANDWIDTH_MAX",
    "POD_BANDWIDTH_MAX",
    "POD_BANDWIDTH_MIN",
    "POLICY_NAME",
    "admission_policy",
    "bandwidth_words",
    "pod_bandwidth_text",
]

LABEL_POD_BANDWIDTH_MAX: Final = "portal.gpu-quota.io/pod-bandwidth-max"
ANNOTATION_INGRESS: Final = "kubernetes.io/ingress-bandwidth"
ANNOTATION_EGRESS: Final = "kubernetes.io/egress-bandwidth"
POLICY_NAME: Final = "gpu-quota-portal-pod-bandwidth"
# The least a cap may be (1 kbit/s: below it the bandwidth plugin's token bucket is useless)
# and the most (400 Gbit/s, the fastest NIC a GPU node has: above it a cap caps nothing).
POD_BANDWIDTH_MIN: Final = Decimal(1000)
POD_BANDWIDTH_MIN_TEXT: Final = "1k"
POD_BANDWIDTH_MAX: Final = Decimal(400 * 10**9)

_UNITS: Final = ((Decimal(10**12), "Tbit/s"), (Decimal(10**9), "Gbit/s"), (Decimal(10**6), "Mbit/s"),
                 (Decimal(10**3), "kbit/s"))  # fmt: skip


def pod_bandwidth_text(value: Any) -> str:
    """The canonical quantity text of a per-pod bandwidth cap ("1000M" -> "1G"); ValueError
    saying which rule it breaks: not a quantity, 0 or less, a fraction of a bit per second,
    under 1k or over 400G."""
    text = str(value).strip() if value is not None else ""
    try:
        amount = parse_quantity(text)
        shown = canonical(text)
    except QuantityError as error:
        raise ValueError(
            f"a quantity of bits per second such as 1G or 500M; {text!r} is not one ({error})"
        ) from error
    if amount <= 0:
        raise ValueError(f"{text} is not above 0: a cap is at least 1k bits per second")
    if amount != amount.to_integral_value():
        raise ValueError(f"{text} is a fraction of a bit per second: give whole bits, as in 1G")
    if amount < POD_BANDWIDTH_MIN:
        raise ValueError(f"{text} is under 1k (1,000 bits per second), the least cap there is")
    if amount > POD_BANDWIDTH_MAX:
        raise ValueError(f"{text} is over 400G (400 Gbit/s), the most a cap may be")
    return shown


def bandwidth_words(text: str) -> str:
    """ "1G" -> "1 Gbit/s", "1500M" -> "1.5 Gbit/s": a cap as people read it."""
    amount = parse_quantity(text)
    for size, unit in _UNITS:
        if amount >= size:
            number = (amount / size).normalize()
            return f"{format(number, 'f')} {unit}"
    return f"{format(amount.normalize(), 'f')} bit/s"


def admission_policy(*, cluster: str, kubernetes_version: str) -> list[dict[str, Any]]:
    """The ValidatingAdmissionPolicy and its binding that hold pods, in the namespaces
    labelled with a cap, to it: a pod created without both bandwidth annotations, or with
    either above the cap (or not a quantity), is refused. ValueError on a cluster older than
    Kubernetes 1.30 (no ValidatingAdmissionPolicy)."""
    if kubernetes_minor(kubernetes_version) < POLICY_MIN_VERSION:
        raise ValueError(
            f"cluster {cluster!r}: a per-pod bandwidth cap needs a ValidatingAdmissionPolicy "
            f"(admissionregistration.k8s.io/v1, Kubernetes 1.30 or later); the cluster runs "
            f"{kubernetes_version}"
        )
    capped = {
        "matchExpressions": [
            {"key": LABEL_POD_BANDWIDTH_MAX, "operator": "Exists"},
            {"key": LABEL_MANAGED_BY, "operator": "In", "values": [MANAGED_BY]},
        ]
    }
    variables = [
        {
            "name": "cap",
            "expression": f"namespaceObject.metadata.labels[{cel_quoted(LABEL_POD_BANDWIDTH_MAX)}]",
        },
        {
            "name": "annotations",
            "expression": "has(object.metadata.annotations) ? object.metadata.annotations : {}",
        },
    ]
    both = f"{ANNOTATION_INGRESS} and {ANNOTATION_EGRESS}"  # inside a CEL string
    validations: list[dict[str, Any]] = [
        {
            "expression": f"{cel_quoted(ANNOTATION_INGRESS)} in variables.annotations && "
            f"{cel_quoted(ANNOTATION_EGRESS)} in variables.annotations",
            "messageExpression": f"'this namespace caps each pod at ' + variables.cap + ' bits "
            f"per second each way: set the annotations {both} (each at most ' + variables.cap "
            "+ ')'",
            "reason": "Forbidden",
        }
    ]
    for annotation in (ANNOTATION_INGRESS, ANNOTATION_EGRESS):
        value = f"variables.annotations[{cel_quoted(annotation)}]"
        validations.append(
            {
                "expression": f"!({cel_quoted(annotation)} in variables.annotations) || "
                f"(isQuantity({value}) && "
                f"!quantity({value}).isGreaterThan(quantity(variables.cap)))",
                "messageExpression": f"'{annotation} ' + {value} + (isQuantity({value}) ? "
                "' is above this namespace\\'s cap of ' + variables.cap + ' bits per second' "
                ": ' is not a quantity of bits per second, such as 10M')",
                "reason": "Forbidden",
            }
        )
        # A quantity may be negative or 0: "-1G" is never above a cap, and the kubelet
        # refuses a pod's bandwidth under 1k only when it sets the pod's network up.
        validations.append(
            {
                "expression": f"!({cel_quoted(annotation)} in variables.annotations) || "
                f"!isQuantity({value}) || "
                f"!quantity({value}).isLessThan(quantity({cel_quoted(POD_BANDWIDTH_MIN_TEXT)}))",
                "messageExpression": f"'{annotation} ' + {value} + ' is below "
                f"{POD_BANDWIDTH_MIN_TEXT} (1,000 bits per second), the least a pod\\'s "
                "bandwidth may be'",
                "reason": "Forbidden",
            }
        )
    pods = {
        "apiGroups": [""],
        "apiVersions": ["v1"],
        "operations": ["CREATE"],
        "resources": ["pods"],
    }
    return policy_pair(
        name=POLICY_NAME,
        cluster=cluster,
        resource_rules=[pods],
        variables=variables,
        validations=validations,
        selector=capped,
    )
