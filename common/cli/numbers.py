"""Numbers on the command line: one parser for every flag that takes a bounded positive number,
so each flag says only its bounds and unit, and every message reads alike."""

from __future__ import annotations

import argparse
from collections.abc import Callable

__all__ = ["positive_number"]


def positive_number(*, unit: str = "", at_most: float | None = None) -> Callable[[str], float]:
    """An argparse `type`: a float more than 0 (and at most `at_most`); `unit` ("seconds")
    goes into the messages."""
    of_unit = f" of {unit}" if unit else ""
    bounds = "more than 0" + (f" and at most {at_most:g}" if at_most is not None else "")
    bounds += f" {unit}" if unit else ""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number{of_unit}: {text!r}") from None
        if not value > 0 or (at_most is not None and value > at_most):
            raise argparse.ArgumentTypeError(f"must be {bounds}, got {text!r}")
        return value

    return parse
