"""Discovery: raw facts from `sources` turned into the topology model and the node labels.

`discover` assembles it all, `topology` builds the model, `links` gives each GPU/NIC pair its
`nvidia-smi topo -m` word, `matching` pairs GPUs with NICs, `labels` derives the label values
(a dataset label gets its value there, from the newest complete cached version), `table`
prints the human view. Pure: every read happens in `sources`.

Imports: `sources` and `common` only.
"""
