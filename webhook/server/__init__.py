"""The HTTPS admission server: AdmissionReview in, JSONPatch out.

`review` parses and checks the request, `admission` decides with the engine and builds the
answer, `app` is the aiohttp application (access log, health), `runner` binds it and drains
in-flight admissions on exit (SIGTERM),
`tls` serves and reloads the key pair, `reload` swaps the policy set when its files change,
`metrics` is the Prometheus registry, `node_cache` lists and watches nodes for the
placement warnings, which `webhook.warnings` decides and fits, and `template_cache` the DRA
templates (both on `common.kube.listwatch`). With `--numa-scheduling` the app also mounts
`webhook.scheduler`'s extender routes and reads its Lease verdicts.

Imports: `scheduler`, `warnings`, `explain`, `engine`, `policy`, the webhook wire formats and
`common`; never `certs` or `cli`.
"""
