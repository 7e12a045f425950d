"""Counts taken from the agent's pod watch, each pod once: kubelet refusals, prefetches."""
