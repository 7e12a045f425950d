"""Topoplace node agent: hardware discovery, node label sync and dataset prefetch."""
