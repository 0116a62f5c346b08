"""Local passwords are stored as Argon2id at OWASP's first setting (19 MiB, 2 passes, 1 lane);
a password stored by PBKDF2 (the previous default) or with other Argon2 parameters still signs
in, and is stored again as Argon2id at that sign-in. The tests' own settings use MD5 for speed,
so these tests put the production list back (tests/portal/test_settings.py checks that list)."""

from __future__ import annotations

import uuid

import pytest
from django.conf import settings as django_settings
from django.contrib.auth.hashers import Argon2PasswordHasher, check_password, make_password
from django.test import Client

from tenants.models import User

PASSWORD = "larch-meadow-7731"
HASHERS = [
    "identity.passwords.Argon2idPasswordHasher",
    "django.contrib.auth.hashers.PBKDF2PasswordHasher",
]
ARGON2ID = "argon2$argon2id$v=19$m=19456,t=2,p=1$"

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("hashers")]


@pytest.fixture
def hashers(settings):  # type: ignore[no-untyped-def]
    settings.PASSWORD_HASHERS = HASHERS
    # The login rate limit counts sign-ins per address in the real cache (Redis in CI): this
    # test's count is its own, not the suite's sign-ins from 127.0.0.1 in the same minute.
    caches = {name: dict(conf) for name, conf in django_settings.CACHES.items()}
    caches["default"]["KEY_PREFIX"] = f"test-{uuid.uuid4().hex}"
    settings.CACHES = caches


def stored(username: str) -> str:
    return User.objects.get(username=username).password


def sign_in(username: str, password: str):  # type: ignore[no-untyped-def]
    return Client().post("/login/", {"username": username, "password": password})


def test_a_new_password_is_stored_as_argon2id_at_owasps_setting():
    encoded = make_password(PASSWORD)
    assert encoded.startswith(ARGON2ID)
    assert check_password(PASSWORD, encoded)
    assert not check_password(PASSWORD + "x", encoded)
    assert make_password(PASSWORD) != encoded  # salted: the same password, another hash


def test_a_pbkdf2_password_signs_in_and_is_stored_again_as_argon2id():
    old = make_password(PASSWORD, hasher="pbkdf2_sha256")
    User.objects.create(username="hana", password=old)

    wrong = sign_in("hana", "not-" + PASSWORD)
    assert wrong.status_code == 200
    assert b"did not match" in wrong.content
    assert stored("hana") == old  # a failed sign-in rewrites nothing

    answer = sign_in("hana", PASSWORD)
    assert answer.status_code == 302, answer.content
    assert stored("hana").startswith(ARGON2ID)

    again = sign_in("hana", PASSWORD)  # the rewritten hash checks too
    assert again.status_code == 302
    assert sign_in("hana", "not-" + PASSWORD).status_code == 200


def test_an_argon2_hash_with_other_parameters_is_stored_again_at_owasps():
    stock = Argon2PasswordHasher()  # Django's own: 100 MiB, 2 passes, 8 lanes
    old = stock.encode(PASSWORD, stock.salt())
    assert not old.startswith(ARGON2ID)
    User.objects.create(username="ivo", password=old)

    assert sign_in("ivo", PASSWORD).status_code == 302
    rewritten = stored("ivo")
    assert rewritten.startswith(ARGON2ID)
    assert stock.verify(PASSWORD, rewritten)  # the stock hasher still reads it


def test_a_current_hash_is_not_rewritten_at_sign_in():
    User.objects.create(username="juno", password=make_password(PASSWORD))
    before = stored("juno")
    assert sign_in("juno", PASSWORD).status_code == 302
    assert stored("juno") == before
