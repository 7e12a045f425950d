"""Plain stores the webhook keeps of cluster objects, each fed by the one list+watch helper
(common/kube/listwatch.py): every node (`node_store`), the ResourceClaimTemplates
(`claim_template_store`). Admission reads them; it never waits on them."""
