"""Writes of the dashboards app: showback prices (admins), audited."""

from __future__ import annotations

from datetime import date
from decimal import Decimal

from django.db import transaction

from core.errors import Conflict, ValidationFailed
from dashboards.models import FlavorPrice
from quotas.choices import FlavorKind
from quotas.models import ResourceFlavor
from tenants.models import User
from tenants.services import audit_record


def _snapshot(price: FlavorPrice) -> dict[str, str]:
    return {
        "cluster": price.flavor.cluster.name,
        "flavor": price.flavor.name,
        "price": f"{price.price:f}",
        "currency": price.currency,
        "valid_from": price.valid_from.isoformat(),
    }


@transaction.atomic
def flavor_price_set(
    *, actor: User | None, flavor: ResourceFlavor, price: Decimal, currency: str, valid_from: date
) -> FlavorPrice:
    """The price of one hour of ``flavor`` from ``valid_from`` on (until its next price).
    Only GPU and MIG flavors are priced; one price per flavor and day (Conflict, 409)."""
    if flavor.kind not in (FlavorKind.GPU, FlavorKind.MIG):
        raise ValidationFailed.for_field(
            "flavor", "only GPU and MIG flavors have a showback price."
        )
    if price < 0:
        raise ValidationFailed.for_field("price", "a price is zero or more.")
    if FlavorPrice.objects.filter(flavor=flavor, valid_from=valid_from).exists():
        raise Conflict.for_field(
            "valid_from", f"{flavor.name} already has a price from {valid_from:%Y-%m-%d}."
        )
    row = FlavorPrice.objects.create(
        flavor=flavor, price=price, currency=currency, valid_from=valid_from
    )
    audit_record(actor=actor, action="flavor_price.created", obj=row, after=_snapshot(row))
    return row
