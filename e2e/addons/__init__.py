"""What a real cluster has beside Kubernetes and Topoplace, on 127.0.0.1: the object store,
Kueue, and a Prometheus scraping our pods."""
