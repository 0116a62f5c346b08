"""Words people read carry no internal requirement codes (R19, R8): not in the API document,
not in the forms' help texts, not in the reasons the portal writes on drafts."""

from __future__ import annotations

import re

from django.apps import apps
from drf_spectacular.generators import SchemaGenerator

from advice import services as advice_services

CODE = re.compile(r"\bR\d{1,2}\b")


def test_the_api_document_has_no_requirement_codes():
    document = str(SchemaGenerator().get_schema(request=None, public=True))
    assert CODE.findall(document) == []


def test_help_texts_have_no_requirement_codes():
    found = [
        f"{model.__name__}.{field.name}: {field.help_text}"
        for model in apps.get_models()
        for field in model._meta.get_fields()
        if CODE.search(str(getattr(field, "help_text", "") or ""))
    ]
    assert found == []


def test_the_suggestion_rule_has_no_requirement_codes():
    assert CODE.findall(advice_services.RULE) == []


def test_the_seeded_tiers_are_described_in_words(db):
    from quotas.models import TierTemplate
    from tests.conftest import ensure_tier_templates

    ensure_tier_templates()
    descriptions = list(TierTemplate.objects.values_list("description", flat=True))
    assert descriptions and all(d.startswith("Standard tier: ") for d in descriptions)
    assert [d for d in descriptions if CODE.search(d)] == []
