"""The model rows of ``dormant status``: the tokens the model servers counted,
and the threads waiting on a model endpoint that is down."""

from __future__ import annotations

from rich.text import Text

from ..records import StoreStatus
from .base import clip, when


def model_rows(status: StoreStatus) -> list[tuple[str, str | Text]]:
    """(label, value) rows: model tokens summed over the threads, and, when threads wait
    on a model endpoint, how many, until when and why (the commonest reasons)."""
    usage = status.usage
    rows: list[tuple[str, str | Text]] = [
        (
            "model tokens",
            f"prompt {usage.get('prompt', 0):,} (cached {usage.get('cached', 0):,}), "
            f"completion {usage.get('completion', 0):,}",
        )
    ]
    if status.threads_waiting:
        reasons = "; ".join(f"{n:,}x {clip(reason, 120)}" for reason, n in status.waiting_by_reason.items())
        line = f"{status.threads_waiting:,} until {when(status.waiting_until)}: {reasons}"
        rows.append(("waiting on model", Text(line, style="yellow")))
    return rows
