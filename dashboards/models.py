"""Showback prices: what a flavor-hour costs, from a date on (admins set them)."""

from __future__ import annotations

from django.core.validators import RegexValidator
from django.db import models
from django.db.models import Q

CURRENCY_MAX = 3
currency_code = RegexValidator(r"^[A-Z]{3}$", "an ISO 4217 code of three capital letters (EUR).")


class FlavorPrice(models.Model):
    """The price of one hour of one GPU (or MIG instance) of ``flavor`` from ``valid_from`` on,
    until the next price of the same flavor. A month is priced at the price in force on its
    first day."""

    flavor = models.ForeignKey(
        "quotas.ResourceFlavor", on_delete=models.CASCADE, related_name="prices"
    )
    price = models.DecimalField(max_digits=12, decimal_places=4, help_text="Per flavor-hour.")
    currency = models.CharField(max_length=CURRENCY_MAX, default="EUR", validators=[currency_code])
    valid_from = models.DateField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["flavor_id", "-valid_from"]
        constraints = [
            models.UniqueConstraint(
                fields=["flavor", "valid_from"], name="dashboards_price_unique_flavor_day"
            ),
            models.CheckConstraint(condition=Q(price__gte=0), name="dashboards_price_gte_0"),
            models.CheckConstraint(
                condition=Q(currency__regex=r"^[A-Z]{3}$"), name="dashboards_price_currency_iso"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.flavor_id} {self.price} {self.currency} from {self.valid_from}"
