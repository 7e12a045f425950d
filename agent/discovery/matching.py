"""Maximum one-to-one matching in a bipartite graph (GPUs to RDMA NICs).

Augmenting paths (Kuhn's algorithm): O(V·E), microseconds for the at most a few dozen devices
on a node, and deterministic — lower indices are tried first — so labels never flap.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["maximum_matching"]


def maximum_matching(adjacent: Sequence[Sequence[int]]) -> dict[int, int]:
    """`adjacent[left]` lists the right vertices `left` may pair with; returns left -> right."""
    owner: dict[int, int] = {}  # right -> left

    def augment(left: int, visited: set[int]) -> bool:
        for right in adjacent[left]:
            if right in visited:
                continue
            visited.add(right)
            if right not in owner or augment(owner[right], visited):
                owner[right] = left
                return True
        return False

    for left in range(len(adjacent)):
        # Take a free partner when there is one; re-pair earlier vertices only when needed,
        # so GPU0 keeps NIC0 rather than being pushed to NIC1 by GPU1.
        free = next((r for r in adjacent[left] if r not in owner), None)
        if free is not None:
            owner[free] = left
        else:
            augment(left, set())
    return {left: right for right, left in sorted(owner.items())}
