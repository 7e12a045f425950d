"""The `topoplace-agent` commands, each a thin layer over its room.

`main` lists the subcommands; each module has `add_arguments(parser)` and `run(args)`, and
imports its heavy dependencies inside `run`. Imports any agent room and `common`.
"""
