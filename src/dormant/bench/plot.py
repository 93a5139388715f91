"""The RSS-against-agents chart, one line per store (matplotlib, Agg backend)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from .scale import load_summary, load_waves


def plot_runs(runs: Sequence[Path], out: Path, title: str | None = None) -> Path:
    """Draw RSS (MiB) against agents for each run directory (``waves.csv`` + ``summary.json``).

    Raises ``FileNotFoundError`` naming the first run directory that lacks its files.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=120)
    for run in runs:
        waves_path, summary_path = run / "waves.csv", run / "summary.json"
        for path in (waves_path, summary_path):
            if not path.exists():
                raise FileNotFoundError(f"{path} not found: is {run} a `dormant bench scale` output?")
        waves = load_waves(waves_path)
        summary = load_summary(summary_path)
        label = (
            f"{run.name}: {summary['turns_per_s']:.0f} turns/s, "
            f"slope {summary['rss_slope_kib_per_agent']:.2f} KiB/agent"
        )
        ax.plot(
            [w.agents for w in waves],
            [w.rss_bytes / 2**20 for w in waves],
            marker="o",
            markersize=3,
            label=label,
        )
    ax.set_xlabel("agents launched")
    ax.set_ylabel("process RSS (MiB)")
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.legend(loc="upper left", fontsize=8)
    ax.set_title(title or "agent_scale: RSS against agents")
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out)
    plt.close(fig)
    return out
