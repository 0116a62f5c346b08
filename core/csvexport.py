"""CSV for spreadsheets, safe to open: every CSV export writes through ``csv_writer``.

OWASP's CSV injection advice: a cell starting with ``=``, ``+``, ``-``, ``@``, a tab or a
carriage return is read by spreadsheets as a formula (``=HYPERLINK(...)``, ``-2+3``), so such a
cell is written with a leading single quote, which spreadsheets show as text. A cell that is
only a number (``-3``, ``+2.5``) is no formula and is left as it is, so figures stay figures.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Iterable
from typing import Any

FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
_NUMBER = re.compile(r"[+-]?[0-9]+(?:\.[0-9]+)?\Z")


def csv_cell(value: Any) -> Any:
    """``value``, or text starting with a quote when a spreadsheet would run it."""
    if isinstance(value, str) and value.startswith(FORMULA_STARTS) and not _NUMBER.match(value):
        return "'" + value
    return value


class SafeCsvWriter:
    """``csv.writer`` whose every cell goes through ``csv_cell``."""

    def __init__(self, out: Any) -> None:
        self._writer = csv.writer(out)

    def writerow(self, row: Iterable[Any]) -> Any:
        return self._writer.writerow([csv_cell(value) for value in row])


def csv_writer(out: Any) -> SafeCsvWriter:
    return SafeCsvWriter(out)
