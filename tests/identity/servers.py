"""Real identity servers for the sign-in tests, started by the tests themselves.

* An OpenID provider: ``oidc-provider-mock`` (a real OpenID Connect provider built on Authlib:
  discovery, JWKS, authorization, token, userinfo and end-session endpoints, RS256 ID tokens),
  served on a free local port from a thread. Its users and their claims (groups included) are
  set over its HTTP API (``PUT /users/<sub>``), as an admin would change them at the provider.
* An OpenLDAP directory: Debian's ``slapd``, in the foreground on a free port with a temporary
  ``slapd.conf`` and MDB database, seeded and changed with ``ldapadd`` / ``ldapmodify``.

Absent servers skip locally and fail in CI (``REQUIRE_SERVICES=1``).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import requests

from identity import oidc
from tests.conftest import require_service

CLIENT_ID = "gpu-portal"
CLIENT_SECRET = "client-secret-Qw8rT2vX"
PROVIDER_NAME = "Company SSO"
OIDC_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "identity.backends.LocalBackend",
    "identity.backends.PortalOIDCBackend",
]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def oidc_provider(**options: Any) -> Iterator[str]:
    """An OpenID provider on a free port; yields its issuer URL (``http://localhost:PORT``).
    ``options`` go to ``oidc_provider_mock.run_server_in_thread`` (``access_token_max_age``
    sets the ID token's lifetime too)."""
    try:
        from oidc_provider_mock import run_server_in_thread
    except ImportError as exc:  # a dev dependency
        require_service("oidc-provider-mock", False, f"not installed: {exc}")
        raise
    options.setdefault("require_nonce", True)
    with run_server_in_thread(port=0, **options) as server:
        yield f"http://localhost:{server.server_port}"


def provider_user_set(issuer: str, sub: str, **claims: Any) -> None:
    """What the provider knows about ``sub``: its claims (``preferred_username``, ``email``,
    ``groups``), as an admin sets them at the provider."""
    response = requests.put(f"{issuer}/users/{sub}", json=claims, timeout=5)
    assert response.status_code == 204, response.text


def use_oidc(settings: Any, issuer: str, **extra: Any) -> None:
    """Point the portal at ``issuer`` (pytest-django's ``settings`` fixture)."""
    settings.OIDC_ISSUER = issuer
    settings.OIDC_ENABLED = True
    settings.OIDC_RP_CLIENT_ID = CLIENT_ID
    settings.OIDC_RP_CLIENT_SECRET = CLIENT_SECRET
    settings.OIDC_PROVIDER_NAME = PROVIDER_NAME
    settings.AUTHENTICATION_BACKENDS = OIDC_BACKENDS
    for name, value in extra.items():
        setattr(settings, name, value)
    oidc.forget()


def sso_sign_in(client: Any, sub: str, *, next_url: str | None = None) -> Any:
    """The whole authorization code flow with Django's test client as the browser: the portal
    redirects to the provider, the user (``sub``) approves there (the provider's own form), the
    provider redirects back with a code, the portal's callback answers (returned)."""
    start = client.get("/oidc/authenticate/", {"next": next_url} if next_url else {})
    assert start.status_code == 302, start.content
    authorize = start["Location"]
    approved = requests.post(authorize, data={"sub": sub}, allow_redirects=False, timeout=10)
    assert approved.status_code == 302, approved.text
    back = urlsplit(approved.headers["Location"])
    return client.get(f"{back.path}?{back.query}")


# --- OpenLDAP --------------------------------------------------------------------------------

LDAP_SUFFIX = "dc=example,dc=org"
LDAP_ADMIN_DN = f"cn=admin,{LDAP_SUFFIX}"
LDAP_ADMIN_PASSWORD = "ldap-admin-Pw7z"
LDAP_USERS = f"ou=people,{LDAP_SUFFIX}"
LDAP_GROUPS = f"ou=groups,{LDAP_SUFFIX}"
SCHEMAS = ("core", "cosine", "inetorgperson", "nis")

SLAPD_CONF = """\
{includes}
pidfile {root}/slapd.pid
argsfile {root}/slapd.args
modulepath /usr/lib/ldap
moduleload back_mdb
database mdb
maxsize 16777216
suffix "{suffix}"
rootdn "{admin}"
rootpw {password}
directory {root}/data
access to attrs=userPassword by self read by anonymous auth by * none
access to * by * read
"""

SEED = """\
dn: {suffix}
objectClass: dcObject
objectClass: organization
dc: example
o: Example

dn: {users}
objectClass: organizationalUnit
ou: people

dn: {groups}
objectClass: organizationalUnit
ou: groups
"""


@dataclass
class Directory:
    uri: str
    root: Path

    def _tool(self, tool: str, ldif: str) -> None:
        done = subprocess.run(
            [tool, "-x", "-H", self.uri, "-D", LDAP_ADMIN_DN, "-w", LDAP_ADMIN_PASSWORD],
            input=ldif,
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        assert done.returncode == 0, done.stderr

    def add(self, ldif: str) -> None:
        self._tool("ldapadd", ldif)

    def modify(self, ldif: str) -> None:
        self._tool("ldapmodify", ldif)

    def user_add(self, uid: str, password: str, *, email: str = "") -> str:
        dn = f"uid={uid},{LDAP_USERS}"
        self.add(
            f"dn: {dn}\nobjectClass: inetOrgPerson\nuid: {uid}\ncn: {uid.title()}\n"
            f"sn: {uid.title()}\nmail: {email or uid + '@example.org'}\nuserPassword: {password}\n"
        )
        return dn

    def group_add(self, name: str, *members: str) -> None:
        # groupOfNames needs a member: the admin stands in, so a group can lose all its people.
        lines = "".join(f"member: {m}\n" for m in (LDAP_ADMIN_DN, *members))
        self.add(f"dn: cn={name},{LDAP_GROUPS}\nobjectClass: groupOfNames\ncn: {name}\n{lines}")

    def group_member_remove(self, name: str, member: str) -> None:
        self.modify(
            f"dn: cn={name},{LDAP_GROUPS}\nchangetype: modify\ndelete: member\nmember: {member}\n"
        )


def require_ldap_extra() -> None:
    """python-ldap is an optional extra (it compiles against libldap2-dev and libsasl2-dev):
    skipped where make installed the portal without it, a failure in CI."""
    require_service(
        "python-ldap",
        importlib.util.find_spec("ldap") is not None,
        "LDAP sign-in is not installed (apt-get install libldap2-dev libsasl2-dev, then make)",
    )


@contextmanager
def slapd(tmp: Path) -> Iterator[Directory]:
    """A fresh OpenLDAP server on a free port, in the foreground, stopped at the end."""
    binary = shutil.which("slapd") or (
        "/usr/sbin/slapd" if os.path.exists("/usr/sbin/slapd") else ""
    )
    require_service("slapd", bool(binary), "no slapd (apt-get install slapd ldap-utils)")
    require_service(
        "ldapadd", bool(shutil.which("ldapadd")), "no ldapadd (apt-get install ldap-utils)"
    )
    (tmp / "data").mkdir(parents=True)
    includes = "\n".join(f"include /etc/ldap/schema/{s}.schema" for s in SCHEMAS)
    conf = tmp / "slapd.conf"
    conf.write_text(
        SLAPD_CONF.format(
            includes=includes,
            root=tmp,
            suffix=LDAP_SUFFIX,
            admin=LDAP_ADMIN_DN,
            password=LDAP_ADMIN_PASSWORD,
        )
    )
    port = free_port()
    uri = f"ldap://127.0.0.1:{port}"
    process = subprocess.Popen(
        [binary, "-f", str(conf), "-h", f"{uri}/", "-d", "0"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    err = process.stderr.read().decode() if process.stderr else ""
                    require_service("slapd", False, f"it did not start: {err[-500:]}")
                time.sleep(0.1)
        directory = Directory(uri=uri, root=tmp)
        directory.add(SEED.format(suffix=LDAP_SUFFIX, users=LDAP_USERS, groups=LDAP_GROUPS))
        yield directory
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def use_ldap(settings: Any, directory: Directory, **extra: Any) -> None:
    """Point the portal's login form at ``directory`` (as the LDAP_* variables would)."""
    require_ldap_extra()
    import ldap
    from django_auth_ldap.config import GroupOfNamesType, LDAPSearch

    settings.LDAP_ENABLED = True
    settings.AUTH_LDAP_SERVER_URI = directory.uri
    settings.AUTH_LDAP_BIND_DN = LDAP_ADMIN_DN
    settings.AUTH_LDAP_BIND_PASSWORD = LDAP_ADMIN_PASSWORD
    settings.AUTH_LDAP_USER_SEARCH = LDAPSearch(LDAP_USERS, ldap.SCOPE_SUBTREE, "(uid=%(user)s)")
    settings.AUTH_LDAP_GROUP_SEARCH = LDAPSearch(
        LDAP_GROUPS, ldap.SCOPE_SUBTREE, "(objectClass=groupOfNames)"
    )
    settings.AUTH_LDAP_GROUP_TYPE = GroupOfNamesType(name_attr="cn")
    settings.AUTHENTICATION_BACKENDS = [
        "axes.backends.AxesStandaloneBackend",
        "identity.directory.PortalLDAPBackend",
        "identity.backends.LocalBackend",
    ]
    for name, value in extra.items():
        setattr(settings, name, value)
