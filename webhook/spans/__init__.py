"""The audit per workload: the domains a running workload's pods span and the most hops
between two of them, as a table (`topoplace-webhook spans`) and as metrics (`serve
--workload-spans`). Hops are counted once, in webhook/placement_model/span.py."""
