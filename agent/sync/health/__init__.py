"""The agent's /healthz, /readyz and /metrics, and the series behind them."""
