# Pinned versions of the real control plane, and the cache they build into.
# The wrapper modules in e2e/go/ must require the same versions.
K8S_VERSION=v1.37.2
ETCD_VERSION=v3.6.16
e2e_bin_dir() {
  echo "${TOPOPLACE_E2E_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/topoplace/e2e}/k8s-$K8S_VERSION-etcd-$ETCD_VERSION/bin"
}
# cert-manager's published CRDs (its Go module's deploy/crds), for the cert-manager overlay.
CERT_MANAGER_VERSION=v1.21.2
# Helm, for the chart's e2e checks (charts/topoplace): `go install` from the Go module proxy.
HELM_VERSION=v3.22.0
e2e_helm_dir() {
  echo "${TOPOPLACE_E2E_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/topoplace/e2e}/helm-$HELM_VERSION/bin"
}
# Kyverno, a peer of our webhook in `make bench-e2e` only (never in CI): its admission
# controller built from the Go module proxy through the wrapper module e2e/go/kyverno.
KYVERNO_VERSION=v1.19.1
e2e_kyverno_dir() {
  echo "${TOPOPLACE_E2E_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/topoplace/e2e}/kyverno-$KYVERNO_VERSION/bin"
}
# Kueue, the job queue (`make cluster` runs its controller manager on 127.0.0.1): `go install`
# from the Go module proxy; its CRDs and webhook manifests come from the same module.
KUEUE_VERSION=v0.17.0
e2e_kueue_dir() {
  echo "${TOPOPLACE_E2E_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/topoplace/e2e}/kueue-$KUEUE_VERSION"
}
# Prometheus and promtool (`make cluster` runs Prometheus on 127.0.0.1 scraping our pods;
# promtool checks and unit-tests the shipped rules): `go install` from the Go module proxy,
# the module's v0.3MM.P being Prometheus 3.MM.P, built without service-discovery plugins.
PROMETHEUS_VERSION=v0.316.0
e2e_prometheus_dir() {
  echo "${TOPOPLACE_E2E_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/topoplace/e2e}/prometheus-$PROMETHEUS_VERSION/bin"
}
