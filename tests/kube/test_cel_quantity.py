"""The Kubernetes CEL quantity library in quotas.kube.cel, as the API server defines it
(k8s.io/apiserver/pkg/cel/library/quantity.go): what the stand-in runs policies with."""

from __future__ import annotations

import pytest

from quotas.kube.cel import CelError, evaluate


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("quantity('1000M')", "1G"),  # shown in canonical form
        ("quantity('1.5Gi')", "1536Mi"),
        ("isQuantity('1.5G')", True),
        ("isQuantity('fast')", False),
        ("isQuantity('1 G')", False),
        ("quantity('1Gi') == quantity('1024Mi')", True),  # equal by amount
        ("quantity('1G') == quantity('1Gi')", False),
        ("quantity('1G') != quantity('1Gi')", True),
        ("quantity('1500M').isGreaterThan(quantity('1G'))", True),
        ("quantity('1000M').isGreaterThan(quantity('1G'))", False),
        ("quantity('999M').isLessThan(quantity('1G'))", True),
        ("quantity('1G').isLessThan(quantity('1G'))", False),
        ("quantity('2G').compareTo(quantity('1Gi'))", 1),
        ("quantity('1000M').compareTo(quantity('1G'))", 0),
        ("quantity('1M').compareTo(quantity('1Mi'))", -1),
        ("quantity('-5').sign()", -1),
        ("quantity('0').sign()", 0),
        ("quantity('5m').sign()", 1),
        ("quantity('2k').isInteger()", True),
        ("quantity('500m').isInteger()", False),
        ("quantity('2k').asInteger()", 2000),
        ("quantity('1.5').asApproximateFloat()", 1.5),
        ("quantity('1G').add(quantity('500M'))", "1500M"),
        ("quantity('1Gi').add(1)", "1073741825"),
        ("quantity('1Gi').sub(quantity('512Mi'))", "512Mi"),
        ("quantity('2').sub(3)", "-1"),
        ("quantity('1G').add(quantity('1G')).isGreaterThan(quantity('1999M'))", True),
        # Reading a value out of an object, as a policy does.
        ("quantity(m['cap']).isGreaterThan(quantity(m['ask']))", True),
    ],
)
def test_the_quantity_library(expression, expected):
    result = evaluate(expression, {"m": {"cap": "1G", "ask": "10M"}})
    assert result == expected and type(result) is type(expected)


@pytest.mark.parametrize(
    ("expression", "error"),
    [
        ("quantity('fast')", "invalid quantity 'fast'"),
        ("quantity('500m').asInteger()", "cannot convert value to integer"),
        # A string is not a quantity, nor an int a string: as the API server's type checker.
        ("quantity('1G').isGreaterThan('1G')", "no such overload"),
        ("'1G'.isGreaterThan(quantity('1G'))", "no such overload"),
        # A literal of the wrong type is a compile error, worded as the type checker's.
        ("quantity(5)", "found no matching overload for 'quantity'"),
    ],
)
def test_errors_are_evaluation_errors(expression, error):
    with pytest.raises(CelError, match=error):
        evaluate(expression, {})
