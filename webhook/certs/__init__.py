"""The in-cluster serving certificate: key material, the bootstrap decision, one sync pass.

`keys` makes and reads CA and serving key pairs, `bootstrap` decides what a pass must do
(pure), `sync` does one pass against the API server: the shared Secret and every webhook
`caBundle`.

Imports: the webhook wire formats and `common`; never `server` or `cli`.
"""
