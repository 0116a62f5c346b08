"""Helpers of the portal page tests: a signed-in client and the page's text."""

from __future__ import annotations

from html import unescape
from typing import Any

from django.test import Client

from tenants.models import User


def logged_in(user: User | None, *, csrf: bool = False) -> Client:
    """A client signed in as ``user`` (anonymous for None); ``csrf`` enforces CSRF checks."""
    client = Client(enforce_csrf_checks=csrf)
    if user is not None:
        client.force_login(user)
    return client


def text(response: Any) -> str:
    return unescape(response.content.decode())


def main(response: Any) -> str:
    """The page's <main>, unescaped, its tags' attributes kept (tests look for data-*)."""
    return text(response).split("<main>")[1].split("</main>")[0]
