"""How local accounts' passwords are stored: Argon2id at OWASP's first recommended setting.

OWASP's Password Storage Cheat Sheet lists Argon2id with 19 MiB of memory, 2 passes and 1 lane
first, and PBKDF2-HMAC-SHA256 at 600,000 iterations as the choice where FIPS-140 compliance is
needed. Django's default, PBKDF2 at 1,000,000 iterations, costs 207 ms of a core per sign-in on
a 2-core VM; this hasher 18 ms, and its memory cost makes each guess dear on GPUs and ASICs too,
which PBKDF2's iterations do not. Twenty people signing in at once took 4 s of both cores with
PBKDF2, long enough to hold up everyone else's pages (bench/README.md, the load test).

The algorithm name stays ``argon2``: Django's stock Argon2 hasher reads these hashes, and a hash
stored with other parameters (or by PBKDF2, the previous default) is rewritten with these at its
owner's next sign-in (``must_update``).
"""

from __future__ import annotations

from django.contrib.auth.hashers import Argon2PasswordHasher


class Argon2idPasswordHasher(Argon2PasswordHasher):
    time_cost = 2
    memory_cost = 19 * 1024  # KiB: 19 MiB a sign-in, freed when the check returns
    parallelism = 1
