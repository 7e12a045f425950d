"""Benchmarks on the real control plane and kubelets (`make bench-e2e`): pod create next to
our peers (`bench_e2e`, which also starts the cluster the others share), datasets, the
NodeResourceTopology's freshness, and a job kept together across nodes."""
