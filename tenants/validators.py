"""Kubernetes naming rules, shared by models (database checks) and serializers."""

from __future__ import annotations

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
