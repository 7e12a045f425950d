"""Topoplace on the local cluster: the manifests applied and their pods, run by the nodes'
kubelets, waited for (`install`)."""
