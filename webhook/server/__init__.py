"""The HTTPS admission server: AdmissionReview in, JSONPatch out.

`review` and `review_head` parse and check the request; `pod_admission` decides a pod with
the engine and the placement warnings (webhook/warnings, which read webhook/stores) and
builds the answer; `workload_admission` does the same for workloads; `answer_cache` reuses
one answer for alike pods; `app` assembles it all into the aiohttp application (access log,
health); `runner` binds it and drains in-flight admissions on exit (SIGTERM); `tls` serves
and reloads the key pair, `cert_expiry` exports its end; `reload` swaps the policy set when
its files change; `metrics` is the Prometheus registry. With `--numa-scheduling` the app
also mounts `webhook.scheduler`'s extender routes.

Imports: `scheduler`, `stores`, `warnings`, `spans`, `workloads`, `engine`, `policy`, the
webhook wire formats and `common`; never `certs` or `cli`.
"""
