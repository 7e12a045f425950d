"""Kubernetes quantities, checked against the independent parser in tests/kube.py."""

from __future__ import annotations

from decimal import Decimal

import pytest

from tests.kube import parse_quantity as oracle
from webhook.policy.quantity import QuantityError, format_cpu, format_memory, parse_quantity


@pytest.mark.parametrize(
    "text", ["500m", "8", "1.5", "96Gi", "1Ki", "128974848", "129e6", "129M", "0.5Ti", "100u", 12]
)
def test_parse_agrees_with_independent_parser(text):
    assert parse_quantity(text) == oracle(text)


@pytest.mark.parametrize("text", ["", "Gi", "12 Gi", "1.2.3", "ten", "5Q", "--1", True])
def test_rejects_non_quantities(text):
    with pytest.raises(QuantityError):
        parse_quantity(text)


@pytest.mark.parametrize(
    ("cores", "text"),
    [
        (Decimal(8), "8"),
        (Decimal("0.1"), "100m"),
        (Decimal("2.5"), "2500m"),
        (Decimal("1e-4"), "1m"),
    ],
)
def test_format_cpu(cores, text):
    assert format_cpu(cores) == text


@pytest.mark.parametrize(
    ("size", "text"),
    [(96 * 2**30, "96Gi"), (768 * 2**30, "768Gi"), (1536 * 2**20, "1536Mi"), (10**9, "1G"),
     (1001, "1001"), (Decimal("10.2"), "11")],
)  # fmt: skip
def test_format_memory_round_trips(size, text):
    assert format_memory(Decimal(size)) == text
    assert oracle(text) >= Decimal(size)
