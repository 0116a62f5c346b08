"""The init container's wait: until the database has every migration of this release.

It waits only for that. Bad settings (no SECRET_KEY, a malformed DATABASE_URL) stop it before it
starts, with the reason; a database it cannot reach for ``--connect-timeout`` seconds ends it
with the reason too (exit 1), so the pod shows the error instead of waiting for ever.
"""

from __future__ import annotations

import time
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import DatabaseError

from portal import health


class Command(BaseCommand):
    help = "Wait until every migration of this release is applied; fail on anything else."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--interval", type=float, default=5.0, help="seconds between tries")
        parser.add_argument(
            "--connect-timeout",
            type=float,
            default=60.0,
            help="seconds to keep trying a database that does not answer before failing",
        )

    def handle(self, *args: Any, interval: float, connect_timeout: float, **options: Any) -> None:
        deadline = time.monotonic() + connect_timeout
        while True:
            try:
                pending = health.pending_migrations()
            except DatabaseError as error:
                reason = health.error_words(error)
                if time.monotonic() >= deadline:
                    raise CommandError(f"The database cannot be reached: {reason}") from None
                self.stderr.write(f"The database cannot be reached yet ({reason}); trying again.")
                time.sleep(interval)
                continue
            if not pending:
                self.stdout.write("Every migration is applied.")
                return
            deadline = time.monotonic() + connect_timeout  # it answered: the clock starts again
            count = len(pending)
            noun = "migration" if count == 1 else "migrations"
            self.stdout.write(f"Waiting for {count} {noun} to be applied (first: {pending[0]}).")
            time.sleep(interval)
