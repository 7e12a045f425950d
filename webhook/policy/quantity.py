"""Kubernetes resource quantities (`500m`, `96Gi`, `1e3`) as exact Decimals, and back.

The engine compares and multiplies CPU and memory amounts; floats would turn `0.1` CPUs into
`100.00000000000001m`, so everything here is Decimal.
"""

from __future__ import annotations

import functools
import re
from decimal import ROUND_CEILING, Decimal, InvalidOperation

__all__ = [
    "QUANTITY_PATTERN",
    "QuantityError",
    "ceil_int",
    "format_cpu",
    "format_memory",
    "parse_quantity",
]

# The grammar of k8s.io/apimachinery/pkg/api/resource: sign, digits with an optional point,
# then a binary suffix, a decimal SI suffix, or a decimal exponent.
QUANTITY_PATTERN = (
    r"^(?P<num>[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))"
    r"(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E|[eE][+-]?[0-9]+)?$"
)
_QUANTITY = re.compile(QUANTITY_PATTERN)
_BINARY = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
# Largest first, so 98304Mi prints as 96Gi.
_BINARY_OUT = sorted(_BINARY.items(), key=lambda kv: -kv[1])
# Longest quantity string whose parse is cached (a real one is a few characters).
_CACHED_CHARS = 32
# e+NNNN: Decimal's default context holds exponents up to 999999.
_MAX_EXPONENT_CHARS = 7
_DECIMAL_OUT = [("E", 18), ("P", 15), ("T", 12), ("G", 9), ("M", 6), ("k", 3)]


class QuantityError(ValueError):
    """A string that is not a Kubernetes quantity."""


def parse_quantity(value: str | int | float | Decimal) -> Decimal:
    """Parse `value` as Kubernetes would; numbers (YAML ints/floats) are accepted too."""
    if type(value) is str and len(value) <= _CACHED_CHARS:
        # Pods repeat a handful of strings ("8", "96Gi", "500m"); Decimals are immutable.
        # Long strings are not kept: the cache must not hold what a request makes up.
        return _parse_text(value)
    return _parse(value)


@functools.lru_cache(maxsize=4096)
def _parse_text(value: str) -> Decimal:
    return _parse(value)


def _parse(value: str | int | float | Decimal) -> Decimal:
    if isinstance(value, bool):
        raise QuantityError(f"expected a quantity such as 500m or 96Gi, got {value!r}")
    if isinstance(value, Decimal | int | float):
        number = Decimal(str(value))
        if not number.is_finite():  # YAML's .nan and .inf, or 1.0e+400 read as a float
            raise QuantityError(f"expected a finite quantity, got {value!r}")
        return number
    match = _QUANTITY.match(value.strip()) if isinstance(value, str) else None
    if match is None:
        raise QuantityError(f"expected a quantity such as 500m, 8 or 96Gi, got {value!r}")
    try:
        number = Decimal(match["num"])
    except InvalidOperation as exc:  # pragma: no cover - the regex admits only decimals
        raise QuantityError(f"not a number in quantity {value!r}") from exc
    suffix = match["suffix"] or ""
    if len(suffix) > _MAX_EXPONENT_CHARS:
        # Beyond any quantity Kubernetes stores; int() would refuse its digits.
        raise QuantityError(f"quantity {value[:32]!r} is out of range")
    try:
        if suffix in _BINARY:
            return number * (Decimal(1024) ** _BINARY[suffix])
        if suffix in _DECIMAL:
            return number.scaleb(_DECIMAL[suffix])
        amount = number.scaleb(int(suffix[1:]))
    except ArithmeticError:  # an exponent past what Decimal holds (1e999999999)
        raise QuantityError(f"quantity {value[:32]!r} is out of range") from None
    if not amount.is_finite():
        raise QuantityError(f"quantity {value[:32]!r} is out of range")
    return amount


def ceil_int(amount: Decimal) -> int:
    """Smallest integer >= amount."""
    return int(amount.to_integral_value(rounding=ROUND_CEILING))


def format_cpu(cores: Decimal) -> str:
    """`8` for whole cores, otherwise millicores (`250m`), rounded up to a whole millicore."""
    if cores == cores.to_integral_value():
        return str(int(cores))
    return f"{ceil_int(cores * 1000)}m"


def format_memory(amount: Decimal) -> str:
    """Bytes (rounded up) with the largest binary suffix that divides exactly, else decimal."""
    size = ceil_int(amount)
    if size == 0:
        return "0"
    for suffix, power in _BINARY_OUT:
        unit = 1024**power
        if size % unit == 0:
            return f"{size // unit}{suffix}"
    for suffix, exponent in _DECIMAL_OUT:
        unit = 10**exponent
        if size % unit == 0:
            return f"{size // unit}{suffix}"
    return str(size)
