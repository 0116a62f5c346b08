"""One world per test module: built once in a transaction that is rolled back at the end;
each test runs in a savepoint inside it (pytest-django's ``db``), so a write one test lets
through cannot leak into the next."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.db import transaction

from tests.isolation.world import IsoWorld, build


@pytest.fixture(scope="module")
def iso_world(django_db_setup: None, django_db_blocker) -> Iterator[IsoWorld]:  # type: ignore[no-untyped-def]
    with django_db_blocker.unblock():
        outer = transaction.atomic()
        outer.__enter__()
        try:
            yield build()
        finally:
            transaction.set_rollback(True)
            outer.__exit__(None, None, None)


@pytest.fixture
def iso(iso_world: IsoWorld, db: None) -> IsoWorld:
    return iso_world
