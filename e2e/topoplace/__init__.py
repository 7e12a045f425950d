"""Topoplace on the local cluster: the manifests applied (`install`), and its processes run
as the manifests run them, beside the pods the kubelets run for them: a manifest container as
a local command line (`pods`), the policies ConfigMap projected as a kubelet does
(`projector`)."""
