"""PlacementPolicy: the pydantic model (`model`, `fields`), Kubernetes quantities, and the loader.

`loader` reads a policies directory (the ConfigMap `..data` layout included) into a
`PolicySet`; every error names file, line, document and field path.

Imports: `common` only (label keys and name rules). Imported by `engine` and everything above.
"""
