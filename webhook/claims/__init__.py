"""DRA ResourceClaimTemplates for DRA policies (`spec.dra`), built and kept in the cluster.

`templates` is pure: the template bodies a policy set wants in a set of namespaces (one per
DRA policy, allowed namespace and GPU count), and the plan that turns the templates found
into the templates wanted. `reconciler` is the I/O: it lists and watches namespaces and the
templates Topoplace owns, and creates and deletes templates until the cluster matches the
plan. It runs as its own command (`topoplace-webhook claim-templates`), one replica.

Imports: `policy`, the webhook vocabulary and `common`. Imported by `cli`.
"""
