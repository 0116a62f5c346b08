"""The quantity template filters: pages read "64 GiB" where a person reads an amount, and
Kubernetes' own text ("1k", "500m", "5G") where a page shows what goes to the cluster."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.template import Context, Template

GI = 1024**3


def render(source: str, **context: object) -> str:
    return Template("{% load quota_tags %}" + source).render(Context(context))


@pytest.mark.parametrize(
    ("amount", "resource", "expected"),
    [
        (Decimal(64 * GI), "memory", "64 GiB"),
        (Decimal("0.5"), "cpu", "0.5 cores"),
        (Decimal(1000), "nvidia.com/gpu", "1000"),
        (None, "memory", "—"),
    ],
)
def test_quantity_is_for_people(amount: Decimal | None, resource: str, expected: str) -> None:
    assert render("{{ a|quantity:r }}", a=amount, r=resource) == expected


@pytest.mark.parametrize(
    ("amount", "resource", "expected"),
    [
        (Decimal(1000), "nvidia.com/gpu", "1k"),
        (Decimal(16), "nvidia.com/gpu", "16"),
        (Decimal("0.5"), "requests.cpu", "500m"),
        (Decimal(64 * GI), "memory", "64Gi"),
        (Decimal(5 * 10**9), "storage", "5G"),
        (None, "memory", "—"),
    ],
)
def test_k8s_quantity_is_what_kubectl_shows(
    amount: Decimal | None, resource: str, expected: str
) -> None:
    assert render("{{ a|k8s_quantity:r }}", a=amount, r=resource) == expected


@pytest.mark.parametrize(
    ("amount", "resource", "expected"),
    [
        (Decimal(1000), "nvidia.com/gpu", "+1k"),
        (Decimal(-512 * 1024**2), "memory", "-512Mi"),
        (Decimal("0.25"), "cpu", "+250m"),
        (Decimal(0), "cpu", "±0"),
    ],
)
def test_k8s_change_is_signed(amount: Decimal, resource: str, expected: str) -> None:
    assert render("{{ a|k8s_change:r }}", a=amount, r=resource) == expected


@pytest.mark.parametrize(
    ("amount", "resource", "expected"),
    [
        (Decimal(2), "nvidia.com/gpu", "+2"),
        (Decimal(-512 * 1024**2), "memory", "-512 MiB"),
        (Decimal(1280 * GI), "memory", "+1.25 TiB"),
        (Decimal("0.25"), "cpu", "+0.25 cores"),
        (Decimal(0), "cpu", "±0"),
        (None, "cpu", "—"),
    ],
)
def test_quantity_change_is_signed_and_for_people(
    amount: Decimal | None, resource: str, expected: str
) -> None:
    assert render("{{ a|quantity_change:r }}", a=amount, r=resource) == expected


@pytest.mark.parametrize(
    ("count", "word", "expected"),
    [(1, "GPU", "1 GPU"), (2, "GPU", "2 GPUs"), (0, "GPU", "0 GPUs"), (Decimal(1), "pod", "1 pod")],
)
def test_counted_says_singular_or_plural(count: object, word: str, expected: str) -> None:
    assert render("{{ n|counted:w }}", n=count, w=word) == expected
