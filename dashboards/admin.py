from django.contrib import admin

from dashboards.models import FlavorPrice


@admin.register(FlavorPrice)
class FlavorPriceAdmin(admin.ModelAdmin):
    list_display = ("flavor", "price", "currency", "valid_from")
    list_filter = ("currency", "flavor__cluster")
    list_select_related = ("flavor", "flavor__cluster")
    ordering = ("flavor__cluster__name", "flavor__name", "-valid_from")
