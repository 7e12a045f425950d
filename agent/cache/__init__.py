"""The dataset cache on the node: filling it, locking it, making room in it.

`prefetch` is the whole sequence (hit check, lock, list, evict, download, verify, rename,
marker last); `source` opens and lists a dataset URL, `download` copies the files in
parallel, `source_errors` maps failures to exit codes, `lock` is the one-writer lock,
`evict` chooses what to remove under `--max-cache-bytes`, `progress` reports, `durable`
makes writes survive a crash. The on-disk layout is `common.cache_layout`.

Imports: `common` only.
"""
