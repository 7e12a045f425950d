"""kube-scheduler's filter rules, re-stated (pure): node selector requirements and terms,
ORed (`selectors`), taints against tolerations (`tolerations`), and the parts of a Node that
decide whether a pod fits (`nodes`)."""
