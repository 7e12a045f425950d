"""What a position source reports, before it becomes labels."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["TierIds", "Tiers"]

# Raw switch-group ids, closest first (tier 1, 2, 3); None where the source does not say.
TierIds = tuple[str | None, str | None, str | None]


@dataclass(frozen=True, slots=True)
class Tiers:
    """One source's view of the node's switch groups."""

    source: str  # for log lines: "AWS labels", "gcp metadata", …
    ids: TierIds

    @property
    def known(self) -> bool:
        return any(i is not None for i in self.ids)
