"""Every CSV the portal writes goes through core.csvexport: what a spreadsheet would run as a
formula (OWASP: a cell starting with = + - @, tab or carriage return) starts with a quote."""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime

import pytest

from core.csvexport import csv_writer


@pytest.mark.parametrize("text", ["=1+1", "+1+1", "-1+1", "@A1", "\t=1", "\r=1"])
def test_a_formula_gets_a_leading_quote(text):
    out = io.StringIO()
    csv_writer(out).writerow([text, "plain", 7, -3, 2.5, None])
    (row,) = csv.reader(io.StringIO(out.getvalue(), newline=""))
    assert row == [f"'{text}", "plain", "7", "-3", "2.5", ""]  # numbers are numbers


def test_other_values_are_written_as_they_are():
    out = io.StringIO()
    when = datetime(2026, 1, 2, tzinfo=UTC)
    csv_writer(out).writerow(["a=b", "team-a", "", when, "-3", "+2.5", "-0.25"])
    (row,) = csv.reader(io.StringIO(out.getvalue(), newline=""))
    assert row == ["a=b", "team-a", "", str(when), "-3", "+2.5", "-0.25"]  # figures stay figures
