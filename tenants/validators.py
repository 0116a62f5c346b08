"""Kubernetes naming rules, shared by models (database checks) and serializers."""

from __future__ import annotations

import re

from django.core.exceptions import ValidationError
from django.core.validators import RegexValidator

# RFC 1123 label as Kubernetes uses it for namespace names: lower-case alphanumerics and '-',
# starting and ending with an alphanumeric, at most 63 characters.
DNS1123_LABEL_REGEX = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
DNS1123_LABEL_MAX = 63
# A tenant's slug prefixes its namespaces ("team-a" -> "team-a-inference"), so it is shorter.
TENANT_SLUG_MAX = 40

dns1123_label = RegexValidator(
    DNS1123_LABEL_REGEX,
    message=(
        "must be a DNS-1123 label: lower-case letters, digits and '-', "
        "starting and ending with a letter or digit"
    ),
    code="dns1123_label",
)

# RFC 1123 subdomain as Kubernetes checks it for most object names, Nodes among them
# (apimachinery's IsDNS1123Subdomain: labels of the form above joined by '.', at most 253
# characters in all). EKS names its nodes ``ip-10-0-1-23.ec2.internal``; on-premises clusters
# often use the host's FQDN.
DNS1123_SUBDOMAIN_REGEX = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
DNS1123_SUBDOMAIN_MAX = 253
NODE_NAME_MAX = DNS1123_SUBDOMAIN_MAX
NODE_NAME_RULE = (
    "a Kubernetes node name: lowercase letters, digits, '-' and '.', each part between dots "
    f"starting and ending with a letter or digit, at most {NODE_NAME_MAX} characters"
)
_DNS1123_SUBDOMAIN_RE = re.compile(DNS1123_SUBDOMAIN_REGEX)


def kubernetes_node_name(value: str) -> None:
    """A Kubernetes node name (a DNS-1123 subdomain), as the API server accepts it."""
    if len(value) > NODE_NAME_MAX:
        raise ValidationError(
            f"is {len(value)} characters long; must be {NODE_NAME_RULE}",
            code="kubernetes_node_name",
        )
    if not _DNS1123_SUBDOMAIN_RE.fullmatch(value):
        raise ValidationError(f"must be {NODE_NAME_RULE}", code="kubernetes_node_name")
