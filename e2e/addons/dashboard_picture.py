"""A picture of the shipped Grafana dashboard, drawn from its own panel queries against a
running Prometheus (`make cluster`'s). No Grafana is built here (its license keeps it out of
this project), so this draws what each panel would show, at the panel's place in the grid:
time series as lines over the last `minutes`, stats as one number, tables as rows.

    python -m e2e.addons.dashboard_picture [--minutes 30] [--out docs/img/dashboard.png]

Needs matplotlib (`pip install matplotlib`); the Prometheus URL comes from the running
cluster's state, as `python -m e2e.cluster prometheus-url` prints it.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from e2e.addons import prometheus

__all__ = ["DASHBOARD", "draw"]

_REPO = Path(__file__).resolve().parents[2]
DASHBOARD = _REPO / "manifests" / "components" / "monitoring" / "topoplace-dashboard.json"
_ROW_INCHES = 0.42  # one grid row; the grid is 24 columns across 16 inches


def _legend(metric: dict[str, str], fmt: str | None) -> str:
    if fmt and "{{" in fmt:
        return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: metric.get(m.group(1), ""), fmt)
    labels = [f"{k}={v}" for k, v in sorted(metric.items()) if k != "__name__"]
    return fmt or ",".join(labels) or "value"


def _series(url: str, expr: str, start: float, end: float) -> list[dict[str, Any]]:
    step = max(15, int((end - start) / 120))
    args = urlencode(
        {"query": prometheus.panel_query(expr), "start": start, "end": end, "step": step}
    )
    return prometheus.query(url, "", path=f"/api/v1/query_range?{args}")["result"]


def _panel(ax: Any, panel: dict[str, Any], url: str, start: float, end: float) -> None:
    ax.set_title(panel["title"], loc="left", fontsize=9, fontweight="bold")
    kind = panel.get("type")
    lines: list[tuple[str, list[float], list[float]]] = []
    for target in panel.get("targets") or []:
        for s in _series(url, target["expr"], start, end):
            xs = [(float(t) - end) / 60 for t, _ in s["values"]]
            ys = [float(v) for _, v in s["values"]]
            lines.append((_legend(s["metric"], target.get("legendFormat")), xs, ys))
    if not lines:
        ax.text(0.5, 0.5, "no data", ha="center", va="center", color="grey")
        ax.set_axis_off()
    elif kind == "stat":
        unit = ((panel.get("fieldConfig") or {}).get("defaults") or {}).get("unit")
        finite = [v for v in lines[0][2] if math.isfinite(v)]  # a ratio of 0/0 is NaN
        value = finite[-1] if finite else math.nan
        text = f"{value:.0%}" if unit == "percentunit" and finite else f"{value:.3g}"
        ax.text(0.5, 0.45, text, ha="center", va="center", fontsize=26, color="tab:green")
        ax.set_axis_off()
    elif kind == "table":
        rows = sorted(lines, key=lambda line: -line[2][-1])[:6]
        for i, (name, _, ys) in enumerate(rows):
            ax.text(0.02, 0.85 - i * 0.14, f"{name}   {ys[-1]:.3g}", fontsize=7, family="monospace")
        ax.set_axis_off()
    else:
        busiest = sorted(lines, key=lambda line: -max(line[2], default=0.0))  # the flat last
        for name, xs, ys in busiest[:8]:
            ax.plot(xs, ys, label=name[:40], linewidth=1.2)
        ax.set_xlabel("minutes ago", fontsize=7)
        ax.tick_params(labelsize=7)
        ax.legend(fontsize=6, loc="upper left", frameon=False)


def draw(url: str, out: Path, *, minutes: float = 30, dashboard: Path = DASHBOARD) -> int:
    """Draw every panel of `dashboard` into `out` (PNG); the number of panels drawn."""
    import matplotlib

    matplotlib.use("Agg")  # no display here
    import matplotlib.pyplot as plt

    panels = json.loads(dashboard.read_text())["panels"]
    rows = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in panels) + 1  # + the title
    fig = plt.figure(figsize=(16, rows * _ROW_INCHES))
    end = time.time()
    for panel in panels:
        g = panel["gridPos"]
        box = (g["x"] / 24, 1 - (g["y"] + 1 + g["h"]) / rows, g["w"] / 24, g["h"] / rows)
        ax = fig.add_axes((box[0] + 0.03, box[1] + 0.03, box[2] - 0.04, box[3] - 0.06))
        _panel(ax, panel, url, end - minutes * 60, end)
    fig.suptitle(
        f"Topoplace: each panel's own query against the e2e Prometheus, the last {minutes:g} min",
        x=0.01, y=1 - 0.3 / rows, ha="left", fontsize=11,
    )  # fmt: skip
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=90)
    return len(panels)


def main(argv: list[str] | None = None) -> int:
    from e2e.cluster import load
    from e2e.state import state_dir

    parser = argparse.ArgumentParser(prog="python -m e2e.addons.dashboard_picture")
    parser.add_argument("--minutes", type=float, default=30, help="time range (default 30)")
    parser.add_argument("--out", type=Path, default=_REPO / "docs" / "img" / "dashboard.png")
    args = parser.parse_args(argv)
    scraper = load(state_dir()).info.get("prometheus")
    if not scraper:
        print(f"this cluster runs no Prometheus ({prometheus.OPT_OUT}=0)", file=sys.stderr)
        return 1
    drawn = draw(scraper["url"], args.out, minutes=args.minutes)
    print(f"{drawn} panels drawn into {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
