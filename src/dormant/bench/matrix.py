"""The benchmark matrix: a grid of cells over sessions, active ratio, history shape
and message mix, each cell in its own process (:mod:`dormant.bench.matrix_cell`).

``--quick`` varies one axis at a time around a base cell (1,000 sessions, 10 % active,
uniform history, text); ``--full`` runs the whole product (3 x 3 x 2 x 4 cells, with
100,000-session cells: hours). Outputs: ``matrix.csv`` and ``matrix.json`` (one row per
cell), ``matrix.png`` (a grid of charts) and ``report.html`` (a table per axis, the
charts inline as data URIs, no external assets).

Figures derived across cells: the RSS slope against sessions (least squares over the
cells that differ only in sessions) and the formula check ``RSS ≈ base + C x W + B
(+ embedder)`` with ``base`` the cell's RSS before its runtime opened, ``C`` the view
byte cap (what one slice in flight holds at most), ``W`` the slices in flight
(concurrency, or fewer active threads), ``B`` the view cache budget.
"""

from __future__ import annotations

import base64
import csv
import html
import io
import json
import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..config import Settings
from .matrix_cell import HISTORIES, MIXES, RUNNABLE_MIXES
from .stats import formula_check, slope_per_unit

SESSIONS_FULL = (1_000, 10_000, 100_000)
ACTIVE_FULL = (1.0, 10.0, 100.0)
#: what one slice in flight holds at most: its view, capped by bytes
PER_SLICE_BYTES: int = Settings.model_fields["view_bytes"].default
AXES = ("sessions", "active_pct", "history", "mix")
COLUMNS = (
    "sessions",
    "active_pct",
    "history",
    "mix",
    "status",
    "threads_active",
    "threads_idle",
    "slices",
    "turns_per_s",
    "rss_end_bytes",
    "rss_peak_bytes",
    "embedder_rss_bytes",
    "rss_slope_kib_per_session",
    "heap_blocks_end",
    "queue_depth_max",
    "queue_bytes_max",
    "view_cache_bytes",
    "view_cache_hit_ratio",
    "view_spill_hits",
    "history_reads_per_slice",
    "history_bytes_per_slice",
    "slice_p50_ms",
    "slice_p95_ms",
    "slice_p99_ms",
    "db_bytes",
    "wal_bytes",
    "formula_predicted_bytes",
    "formula_ratio",
    "formula_holds",
    "seed_s",
)


@dataclass(frozen=True)
class Cell:
    """One point of the grid."""

    sessions: int
    active_pct: float
    history: str
    mix: str

    @property
    def name(self) -> str:
        return f"s{self.sessions}-a{self.active_pct:g}-{self.history}-{self.mix}"

    @property
    def runnable(self) -> bool:
        return self.mix in RUNNABLE_MIXES


def quick_grid(base_sessions: int = 1_000, sessions: Iterable[int] = (1_000, 10_000)) -> list[Cell]:
    """One axis at a time around (``base_sessions``, 10 %, uniform, text); memory on
    the long-tail history (its turns are slow: each runs recall with the embedder)."""
    base = Cell(base_sessions, 10.0, "uniform", "text")
    cells = [Cell(s, 10.0, "uniform", "text") for s in sessions]
    cells += [Cell(base_sessions, a, "uniform", "text") for a in (1.0, 100.0)]
    cells += [Cell(base_sessions, 10.0, "longtail", "text")]
    cells += [Cell(base_sessions, 10.0, "uniform", "blobs"), Cell(base_sessions, 10.0, "uniform", "images")]
    cells += [Cell(base_sessions, 10.0, "longtail", "memory")]
    if base not in cells:
        cells.insert(0, base)
    seen: list[Cell] = []
    for cell in cells:
        if cell not in seen:
            seen.append(cell)
    return seen


def full_grid() -> list[Cell]:
    """Every combination of the four axes."""
    return [Cell(s, a, h, m) for s in SESSIONS_FULL for a in ACTIVE_FULL for h in HISTORIES for m in MIXES]


def not_run(cell: Cell) -> dict[str, Any]:
    """The row of a cell that cannot run yet."""
    return {
        "sessions": cell.sessions,
        "active_pct": cell.active_pct,
        "history": cell.history,
        "mix": cell.mix,
        "status": "not run",
        "note": "image message parts are not in the runtime yet",
    }


def derive(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Add the figures that need several cells (slope against sessions) or the formula."""
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for row in rows:
        if row.get("status") == "ok":
            groups.setdefault((row["active_pct"], row["history"], row["mix"]), []).append(row)
    for group in groups.values():
        points = [(float(r["sessions"]), float(r["rss_end_bytes"])) for r in group]
        slope = slope_per_unit(points) if len({p[0] for p in points}) > 1 else None
        for row in group:
            row["rss_slope_kib_per_session"] = None if slope is None else round(slope, 4)
    for row in rows:
        if row.get("status") != "ok":
            continue
        check = formula_check(
            float(row["rss_end_bytes"]),
            base=float(row["rss_start_bytes"]),
            per_slice=float(PER_SLICE_BYTES),
            in_flight=min(int(row["concurrency"]), int(row["threads_active"])),
            cache_budget=float(row["view_cache_budget"]),
            embedder=float(row["embedder_rss_bytes"]),
        )
        row["formula_predicted_bytes"] = round(check.predicted)
        row["formula_ratio"] = round(check.ratio, 3)
        row["formula_holds"] = check.holds
    return rows


def write_tables(rows: list[dict[str, Any]], out: Path) -> None:
    """``matrix.csv`` (the columns of :data:`COLUMNS`) and ``matrix.json`` (everything)."""
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "matrix.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(COLUMNS), extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    (out / "matrix.json").write_text(json.dumps(rows, indent=2) + "\n")


def _mib(v: Any) -> float:
    return float(v) / (1 << 20)


def chart_png(rows: list[dict[str, Any]]) -> bytes:
    """A 2 x 2 grid of charts (PNG bytes): RSS against each axis, slice p99 against each."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = [r for r in rows if r.get("status") == "ok"]
    fig, axes = plt.subplots(2, 2, figsize=(11, 7), dpi=100)
    panels = [
        ("sessions", "RSS at the end (MiB) against sessions"),
        ("active_pct", "RSS at the end (MiB) against active %"),
        ("history", "slice p50/p99 (ms) by history"),
        ("mix", "RSS at the end (MiB) by message mix (embedder hatched)"),
    ]
    for ax, (axis, title) in zip(axes.flat, panels, strict=True):
        ax.set_title(title, fontsize=9)
        if axis in ("sessions", "active_pct"):
            series: dict[str, list[tuple[float, float]]] = {}
            for r in ok:
                key = " ".join(
                    f"{a}={r[a]:g}" if isinstance(r[a], float) else f"{a}={r[a]}" for a in AXES if a != axis
                )
                series.setdefault(key, []).append((float(r[axis]), _mib(r["rss_end_bytes"])))
            for key, pts in series.items():
                pts.sort()
                ax.plot([x for x, _ in pts], [y for _, y in pts], marker="o", label=key)
            ax.set_xscale("log")
            ax.set_ylim(bottom=0)
            ax.legend(fontsize=6)
        elif axis == "history":
            labels = [f"{r['history']}\n{r['mix']} s{r['sessions']}" for r in ok]
            xs = range(len(ok))
            ax.bar([x - 0.2 for x in xs], [r["slice_p50_ms"] for r in ok], width=0.4, label="p50")
            ax.bar([x + 0.2 for x in xs], [r["slice_p99_ms"] for r in ok], width=0.4, label="p99")
            ax.set_xticks(list(xs), labels, fontsize=5, rotation=45)
            ax.legend(fontsize=6)
        else:
            labels = [f"{r['mix']}\n{r['history']} a{r['active_pct']:g}" for r in ok]
            rest = [_mib(r["rss_end_bytes"]) - _mib(r["embedder_rss_bytes"]) for r in ok]
            emb = [_mib(r["embedder_rss_bytes"]) for r in ok]
            ax.bar(range(len(ok)), rest, label="runtime")
            ax.bar(range(len(ok)), emb, bottom=rest, hatch="//", label="embedder")
            ax.set_xticks(list(range(len(ok))), labels, fontsize=5, rotation=45)
            ax.legend(fontsize=6)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()


def _fmt(key: str, value: Any) -> str:
    if value is None:
        return "-"
    if key.endswith("_bytes") and isinstance(value, int | float):
        return f"{_mib(value):.1f} MiB"
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 1000 else f"{value:,.0f}"
    return str(value)


def html_report(rows: list[dict[str, Any]], png: bytes, meta: dict[str, Any]) -> str:
    """The self-contained report: a table per axis (its cells), the charts inline."""
    shown = [c for c in COLUMNS if c not in AXES]
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'><title>dormant bench matrix</title>",
        "<style>body{font:13px sans-serif;margin:1em}table{border-collapse:collapse;margin:.5em 0 1.5em}"
        "td,th{border:1px solid #ccc;padding:2px 5px;text-align:right}th{background:#eee}",
        "</style></head><body>",
        "<h1>dormant bench matrix</h1>",
        f"<p>{html.escape(json.dumps(meta))}</p>",
        f"<img alt='charts' src='data:image/png;base64,{base64.b64encode(png).decode()}'>",
    ]
    for axis in AXES:
        others = [a for a in AXES if a != axis]
        groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
        for r in rows:
            groups.setdefault(tuple(r[a] for a in others), []).append(r)
        varied = [g for g in groups.values() if len({r[axis] for r in g}) > 1]
        if not varied:
            continue
        parts.append(f"<h2>by {html.escape(axis)}</h2>")
        for group in varied:
            fixed = ", ".join(f"{a}={group[0][a]}" for a in others)
            parts.append(f"<p>{html.escape(fixed)}</p><table><tr><th>{html.escape(axis)}</th>")
            parts += [f"<th>{html.escape(c)}</th>" for c in shown]
            parts.append("</tr>")
            for r in group:
                parts.append(f"<tr><td>{html.escape(str(r[axis]))}</td>")
                parts += [f"<td>{html.escape(_fmt(c, r.get(c)))}</td>" for c in shown]
                parts.append("</tr>")
            parts.append("</table>")
    parts.append("</body></html>")
    return "".join(parts)


def write_report(rows: list[dict[str, Any]], out: Path, meta: dict[str, Any]) -> list[Path]:
    """All outputs of a matrix run in ``out``; the paths written."""
    rows = derive(rows)
    write_tables(rows, out)
    png = chart_png(rows)
    (out / "matrix.png").write_bytes(png)
    (out / "report.html").write_text(html_report(rows, png, meta))
    return [out / n for n in ("matrix.csv", "matrix.json", "matrix.png", "report.html")]


def cell_weight(cell: Cell) -> float:
    """Relative cost of a cell (turns to write and run), for the progress bar's ETA."""
    if not cell.runnable:
        return 0.0
    turns = 20.0 if cell.history == "uniform" else 2.0
    weight = cell.sessions * turns + math.ceil(cell.sessions * cell.active_pct / 100) * 3
    return weight * (8.0 if cell.mix == "memory" else 2.0 if cell.mix == "blobs" else 1.0)
