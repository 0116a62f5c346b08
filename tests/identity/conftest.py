from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.identity.servers import Directory, oidc_provider, slapd, use_ldap, use_oidc


@pytest.fixture
def issuer(settings: Any) -> Iterator[str]:
    """A running OpenID provider the portal is configured for (its issuer URL)."""
    with oidc_provider() as url:
        use_oidc(settings, url)
        yield url


@pytest.fixture(scope="session")
def directory_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Directory]:
    with slapd(tmp_path_factory.mktemp("slapd")) as directory:
        yield directory


@pytest.fixture
def directory(directory_server: Directory, settings: Any) -> Directory:
    """The OpenLDAP server, with the portal's login form pointed at it."""
    use_ldap(settings, directory_server)
    return directory_server
