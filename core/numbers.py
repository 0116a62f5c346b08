"""Numbers read from text a client sent (query parameters, form fields, ids in a path).

``str.isdigit()`` is no test for that: it takes superscripts ("³", which ``int()`` refuses: a
500) and other scripts' digits ("٣", which ``int()`` reads as 3), and any number of digits
(``int()`` refuses more than 4,300: a 500 again). ``ascii_whole`` takes ASCII digits only, and
few enough of them.
"""

from __future__ import annotations

MAX_DIGITS = 18  # every 18-digit number fits a signed 64-bit integer (a bigint, an OFFSET)


def ascii_whole(text: object, *, max_digits: int = MAX_DIGITS) -> int | None:
    """``text`` as a whole number when it is 1 to ``max_digits`` ASCII digits and nothing else
    (no sign, space, underscore, superscript or other script's digit); else None."""
    if (
        not isinstance(text, str)
        or not 0 < len(text) <= max_digits
        or not text.isascii()
        or not text.isdigit()
    ):
        return None
    return int(text)
