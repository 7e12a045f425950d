"""etcd, kube-apiserver, kube-controller-manager and kube-scheduler on 127.0.0.1 (`start`),
with a fresh PKI (`pki`): the cluster CA, serving and client pairs, node client pairs."""
