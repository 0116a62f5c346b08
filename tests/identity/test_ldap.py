"""LDAP sign-in against a real OpenLDAP server (Debian's slapd, started by the tests): bind,
user search, group search, groups that make roles at each sign-in, lockouts."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings as django_settings
from django.test import Client

from identity.choices import GroupRole
from identity.services import group_mapping_create
from tenants.models import Membership, User
from tenants.services import api_token_create
from tests.identity.filing import file_request_with_token
from tests.identity.servers import (
    LDAP_ADMIN_DN,
    LDAP_ADMIN_PASSWORD,
    LDAP_GROUPS,
    LDAP_USERS,
    Directory,
)

pytestmark = pytest.mark.django_db


def test_a_directory_lead_signs_in_and_loses_the_role_when_she_leaves_the_group(
    world, directory: Directory
):
    dn = directory.user_add("lena", "lena-pass-5521")
    directory.group_add("ldap-team-a-leads", dn)
    directory.group_add("ldap-team-a", dn)
    group_mapping_create(
        group="ldap-team-a-leads", role=GroupRole.LEAD, tenant=world.team_a, actor=world.admin
    )
    group_mapping_create(
        group="ldap-team-a", role=GroupRole.VIEWER, tenant=world.team_a, actor=world.admin
    )
    client = Client()
    answer = client.post("/login/", {"username": "lena", "password": "lena-pass-5521"})
    assert answer.status_code == 302, answer.content
    lena = User.objects.get(username="lena")
    assert lena.email == "lena@example.org"  # from the directory's mail attribute
    membership = Membership.objects.get(user=lena, tenant=world.team_a)
    assert (membership.role, membership.source) == ("lead", "group:ldap-team-a-leads")
    token = api_token_create(user=lena, name="ci")[1]
    assert file_request_with_token(token) == 201

    directory.group_member_remove("ldap-team-a-leads", dn)
    again = Client().post("/login/", {"username": "lena", "password": "lena-pass-5521"})
    assert again.status_code == 302
    membership.refresh_from_db()
    assert (membership.role, membership.source) == ("viewer", "group:ldap-team-a")
    assert file_request_with_token(token) == 403
    assert world.team_a.audit_events.filter(
        action="membership.changed_by_group", actor_username="lena"
    ).exists()


def test_a_wrong_directory_password_is_refused_and_locks_out_like_a_local_one(
    world, directory: Directory, settings
):
    directory.user_add("milo", "milo-pass-7781")
    settings.AXES_FAILURE_LIMIT = 3
    for _ in range(2):
        refused = Client().post("/login/", {"username": "milo", "password": "not-it"})
        assert refused.status_code == 200
        assert "did not match" in refused.content.decode()
    assert not User.objects.filter(username="milo").exists()
    Client().post("/login/", {"username": "milo", "password": "not-it"})  # the third
    locked = Client().post("/login/", {"username": "milo", "password": "milo-pass-7781"})
    assert locked.status_code == 429  # even with the right password, until the cool-off
    # A local account on the same form: the same rule.
    for _ in range(3):
        Client().post("/login/", {"username": "alice", "password": "not-it"})
    from tests.factories import PASSWORD

    assert Client().post("/login/", {"username": "alice", "password": PASSWORD}).status_code == 429


def test_local_accounts_still_sign_in_next_to_the_directory(world, directory: Directory):
    from tests.factories import PASSWORD

    assert Client().post("/login/", {"username": "alice", "password": PASSWORD}).status_code == 302


def test_the_directory_settings_come_from_the_environment(directory: Directory, tmp_path: Path):
    """LDAP_* variables (the bind password from a _FILE) configure a backend that binds and
    finds a user in the running directory; the password is never printed."""
    directory.user_add("nora", "nora-pass-1")
    secret = tmp_path / "bind-password"
    secret.write_text(LDAP_ADMIN_PASSWORD + "\n")
    env = {
        **os.environ,
        "LDAP_SERVER_URI": directory.uri,
        "LDAP_BIND_DN": LDAP_ADMIN_DN,
        "LDAP_BIND_PASSWORD_FILE": str(secret),
        "LDAP_USER_BASE": LDAP_USERS,
        "LDAP_GROUP_BASE": LDAP_GROUPS,
    }
    env.pop("LDAP_BIND_PASSWORD", None)
    script = (
        "import django; django.setup()\n"
        "import ldap\n"
        "from django.conf import settings as s\n"
        "assert 'identity.directory.PortalLDAPBackend' in s.AUTHENTICATION_BACKENDS\n"
        "conn = ldap.initialize(s.AUTH_LDAP_SERVER_URI)\n"
        "conn.simple_bind_s(s.AUTH_LDAP_BIND_DN, s.AUTH_LDAP_BIND_PASSWORD)\n"
        "found = s.AUTH_LDAP_USER_SEARCH.execute(conn, {'user': 'nora'})\n"
        "print('found', [dn for dn, _ in found])\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        env={**env, "DJANGO_SETTINGS_MODULE": "portal.settings.demo"},
        cwd=django_settings.BASE_DIR,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"found ['uid=nora,{LDAP_USERS}']" in done.stdout
    assert LDAP_ADMIN_PASSWORD not in done.stdout + done.stderr


def test_ldap_configured_without_the_extra_stops_with_what_to_install(tmp_path: Path):
    """python-ldap is optional (it needs libldap2-dev and libsasl2-dev to build): a portal
    configured for LDAP without it refuses to start and says what to install, rather than
    failing at the first sign-in. The extra is hidden from the child process by a
    ``sitecustomize`` that makes ``import ldap`` fail, as on a machine without it."""
    (tmp_path / "sitecustomize.py").write_text(
        "import sys\nsys.modules['ldap'] = None\nsys.modules['django_auth_ldap'] = None\n"
    )
    env = {
        **os.environ,
        "PYTHONPATH": str(tmp_path),
        "LDAP_SERVER_URI": "ldap://127.0.0.1:1",
        "LDAP_USER_BASE": LDAP_USERS,
        "LDAP_GROUP_BASE": LDAP_GROUPS,
        "DJANGO_SETTINGS_MODULE": "portal.settings.demo",
    }
    done = _python("import django; django.setup()", env)
    assert done.returncode != 0
    assert "LDAP sign-in is not installed" in done.stderr
    assert "requirements-ldap.lock" in done.stderr

    without = {k: v for k, v in env.items() if not k.startswith("LDAP_")}
    done = _python("import django; django.setup(); import identity.backends", without)
    assert done.returncode == 0, done.stderr[-2000:]


def _python(script: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", script],
        env=env,
        cwd=django_settings.BASE_DIR,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
