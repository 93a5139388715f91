"""Prometheus metrics of a runtime: ``dormant run --metrics-port`` and :func:`render`.

Values are read when scraped (:meth:`Exporter.refresh`) and *set* on plain gauges
and counters of a registry of the exporter's own: no custom collector, since those
do not work in prometheus-client's multiprocess mode. Latency histograms are fed as
events happen, through the sinks of :class:`~dormant.metrics.RuntimeStats`'s
recorders. The store's counts (:meth:`Store.status`, a few ``COUNT(*)``) are read at
most once per ``status_ttl_s``, however often Prometheus scrapes.

Exported (all prefixed ``dormant_``): RSS, governor level, soft and hard limits,
level entries, admissions refused and slices cancelled for memory; active slices and
the concurrency now allowed; backlog by priority, ready threads, leased threads;
view cache bytes, entries, budget, hits, misses and hit ratio; histograms of slice,
model and tool latency; slices, failures, completions, compactions, tool calls,
retries and failures, leases lost; outbox entries by status and dead letters;
database and WAL bytes; the age of the oldest ready input; retention tier sizes;
the newest state checkpoint's age and size; the estimated recovery time of every
thread's state (full checkpoints and increments read at 100 MB/s, change records
replayed at 200,000/s). The write-up's bar for recovery is 30 s: alarm when
``dormant_recovery_seconds_estimate`` passes 120 (docs/retention.md). The tier sizes
and checkpoint figures read every message and checkpoint header, so they are read at
most once per ``retention_ttl_s`` (60 s). Model tokens: the counter ``model_tokens_total``
by kind (prompt, completion, cached) of this process's model calls, the gauge
``stored_model_tokens`` by kind summed over the store's threads, replies cut by the
output cap, continuations, refusals, and threads waiting on a model endpoint.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import generate_latest

from ..governor.loop import rss_bytes
from ..parts import budget as part_budget
from ..records import StoreStatus
from ..view.cache import ViewCache

if TYPE_CHECKING:
    from ..runtime import Runtime

#: Latency buckets (seconds) shared by the slice, model and tool histograms.
BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
#: A request to the metrics endpoint may not be larger than this (bytes).
MAX_REQUEST_BYTES = 8192


class Exporter:
    """The metrics of one runtime, in a registry of its own (``registry``)."""

    def __init__(self, rt: Runtime, *, status_ttl_s: float = 5.0, retention_ttl_s: float = 60.0) -> None:
        self.rt = rt
        self.status_ttl_s = status_ttl_s
        self.retention_ttl_s = retention_ttl_s
        self._retention_at = float("-inf")
        self.registry = CollectorRegistry(auto_describe=True)
        self._status: StoreStatus | None = None
        self._status_at = float("-inf")
        self._seen: dict[tuple[int, tuple[str, ...]], float] = {}
        r = self.registry

        def gauge(name: str, doc: str, labels: tuple[str, ...] = ()) -> Gauge:
            return Gauge(f"dormant_{name}", doc, labels, registry=r)

        def counter(name: str, doc: str, labels: tuple[str, ...] = ()) -> Counter:
            return Counter(f"dormant_{name}", doc, labels, registry=r)

        self.rss = gauge("rss_bytes", "Resident set size of this process.")
        self.level = gauge("memory_level", "Governor level: 0 ok, 1 warn, 2 intervene, 3 emergency, 4 hard.")
        self.soft = gauge("memory_soft_limit_bytes", "Soft memory limit (the levels are shares of it).")
        self.hard = gauge("memory_hard_limit_bytes", "Hard memory limit: read-only at or over it.")
        self.entries = counter("memory_level_entries", "Times the governor entered a level.", ("level",))
        self.refused = counter("memory_admissions_refused", "Admissions refused for memory (Overloaded).")
        self.cancelled = counter("memory_slices_cancelled", "Slices cancelled in a memory emergency.")
        self.active = gauge("slices_active", "Slices running now.")
        self.concurrency = gauge("concurrency", "Slices allowed at once now (the governor lowers it).")
        self.backlog = gauge("backlog_inputs", "Inputs waiting, by priority.", ("priority",))
        self.ready = gauge("threads_ready", "Threads with ready input.")
        self.leased = gauge("threads_leased", "Threads leased by a worker.")
        self.threads = gauge("threads", "Threads by status.", ("status",))
        self.cache_bytes = gauge("view_cache_bytes", "Bytes of views cached.")
        self.cache_entries = gauge("view_cache_entries", "Views cached.")
        self.cache_budget = gauge("view_cache_budget_bytes", "Byte budget of the view cache now.")
        self.cache_hits = counter("view_cache_hits", "View cache hits.")
        self.cache_misses = counter("view_cache_misses", "View cache misses.")
        self.spill_hits = counter("view_spill_hits", "View cache misses served by the spill file.")
        self.spill_entries = gauge("view_spill_entries", "Views kept in the spill file.")
        self.cache_ratio = gauge("view_cache_hit_ratio", "Hits / (hits + misses) since start.")
        self.slice_seconds = Histogram(
            "dormant_slice_seconds", "Latency of a successful slice.", buckets=BUCKETS, registry=r
        )
        self.model_seconds = Histogram(
            "dormant_model_seconds", "Latency of one model call.", buckets=BUCKETS, registry=r
        )
        self.tool_seconds = Histogram(
            "dormant_tool_seconds", "Latency of one tool call (inline or async).", buckets=BUCKETS, registry=r
        )
        self.counts = {
            name: counter(name, doc)
            for name, doc in (
                ("slices", "Slices committed."),
                ("slice_failures", "Slices that failed (nothing committed)."),
                ("completions", "Model calls answered."),
                ("compactions", "Summaries written."),
                ("tool_calls", "Async tool calls run."),
                ("tool_retries", "Async tool call retries."),
                ("tool_failures", "Async tool calls that failed for good."),
                ("leases_lost", "Slices whose thread lease expired or was taken (or were cancelled)."),
                ("replies_cut", "Model replies cut by the output cap (finish_reason length)."),
                ("continuations", "Model calls that continued a cut reply."),
                ("refusals", "Model replies refused (content filter or refusal); the slice failed."),
            )
        }
        self.tokens = counter(
            "model_tokens", "Tokens the model servers counted for this process's calls.", ("kind",)
        )
        self.stored_tokens = gauge(
            "stored_model_tokens",
            "Tokens the model servers counted, summed over the store's threads.",
            ("kind",),
        )
        self.mcp = counter(
            "mcp", "MCP calls, failures, timeouts and server restarts, per server.", ("server", "event")
        )
        self.approvals_open = gauge("approvals_open", "Tool calls and questions waiting for a person.")
        self.approvals_oldest = gauge(
            "approvals_oldest_open_seconds", "Age of the oldest open wait (0: none)."
        )
        self.approvals = counter(
            "approvals_decided",
            "Waits this process acted on, by outcome (expired is not denied).",
            ("outcome",),
        )
        self.part_bytes = gauge("part_bytes_in_flight", "Bytes of images and files model requests hold now.")
        self.part_limit = gauge("part_bytes_in_flight_limit", "Budget of part bytes in flight.")
        self.part_waiting = gauge("part_budget_waiting", "Model requests waiting for part bytes now.")
        self.part_waits = counter("part_budget_waits", "Model requests that waited for part bytes.")
        self.waiting = gauge("threads_waiting_model", "Threads waiting on a model endpoint (outage).")
        self.outbox = gauge("outbox_entries", "Outbox entries by status.", ("status",))
        self.dead = gauge("dead_letters", "Outbox entries dead-lettered.")
        self.db_bytes = gauge("db_bytes", "Size of the database file.")
        self.wal_bytes = gauge("wal_bytes", "Size of the write-ahead log.")
        self.oldest_ready = gauge(
            "oldest_ready_input_age_seconds", "Age of the oldest input a thread could consume now (0: none)."
        )
        self.tiers = gauge("retention_tier_bytes", "Bytes each retention tier takes in the store.", ("tier",))
        self.checkpoint_age = gauge(
            "checkpoint_age_seconds", "Age of the newest recoverable state checkpoint (-1: none)."
        )
        self.checkpoint_bytes = gauge("checkpoint_bytes", "Size of the newest recoverable state checkpoint.")
        self.recovery = gauge(
            "recovery_seconds_estimate",
            "Estimated time to recover every thread's state (bar 30 s, alarm past 120 s).",
        )
        stats = rt.stats
        stats.slice_latency.sinks.append(self.slice_seconds.observe)
        stats.model_latency.sinks.append(self.model_seconds.observe)
        stats.tool_latency.sinks.append(self.tool_seconds.observe)

    def _count(self, metric: Counter, value: float, *labels: str) -> None:
        """Bring a counter up to ``value`` (a total kept elsewhere)."""
        key = (id(metric), labels)
        delta = value - self._seen.get(key, 0.0)
        if delta > 0:
            (metric.labels(*labels) if labels else metric).inc(delta)
            self._seen[key] = value

    async def refresh(self) -> None:
        """Read every value now (the store's counts at most once per ``status_ttl_s``)."""
        rt = self.rt
        self.rss.set(rss_bytes())
        governor = rt.governor
        if governor is not None:
            state = governor.state
            self.level.set(int(state.level))
            self.soft.set(state.soft_limit)
            self.hard.set(state.hard_limit)
            for level, n in state.transitions.items():
                self._count(self.entries, n, level.name.lower())
            self._count(self.refused, governor.admissions_refused)
            self._count(self.cancelled, getattr(governor.handles.cancel_slices, "cancelled", 0))
        self.active.set(rt.scheduler.active)
        self.concurrency.set(rt.scheduler.concurrency)
        cache = getattr(rt.store, "views", None)
        if isinstance(cache, ViewCache):
            c = cache.stats()
            self.cache_bytes.set(c.bytes)
            self.cache_entries.set(c.entries)
            self.cache_budget.set(c.max_bytes)
            self._count(self.cache_hits, c.hits)
            self._count(self.cache_misses, c.misses)
            self._count(self.spill_hits, c.spill_hits)
            self.spill_entries.set(c.spill_entries)
            self.cache_ratio.set(c.hits / (c.hits + c.misses) if c.hits + c.misses else 0.0)
        for name, metric in self.counts.items():
            self._count(metric, getattr(rt.stats, name))
        for kind in ("prompt", "completion", "cached"):
            self._count(self.tokens, getattr(rt.stats, f"{kind}_tokens"), kind)
        for server in rt.mcp.status():  # as many as the agents name: a bounded label set
            for event in ("calls", "failures", "timeouts", "restarts"):
                self._count(self.mcp, server.counters[event], server.name, event)
        parts = part_budget.SHARED.stats()
        self.part_bytes.set(parts.held)
        self.part_limit.set(parts.limit)
        self.part_waiting.set(parts.waiting)
        self._count(self.part_waits, parts.waits)
        status = await self._store_status()
        for priority, n in status.backlog_by_priority.items():
            self.backlog.labels(priority).set(n)
        for priority in ("P0", "P1", "P2"):
            if priority not in status.backlog_by_priority:
                self.backlog.labels(priority).set(0)
        for name, n in status.threads_by_status.items():
            self.threads.labels(name).set(n)
        self.ready.set(status.threads_ready)
        self.leased.set(status.threads_leased)
        for name, n in status.outbox_by_status.items():
            self.outbox.labels(name).set(n)
        self.dead.set(status.dead_letters)
        for kind in ("prompt", "completion", "cached"):
            self.stored_tokens.labels(kind).set(status.usage.get(kind, 0))
        self.waiting.set(status.threads_waiting)
        self.db_bytes.set(status.db_bytes)
        self.wal_bytes.set(status.wal_bytes)
        opened, oldest_wait = await rt.store.open_approvals()
        self.approvals_open.set(opened)
        self.approvals_oldest.set(0.0 if oldest_wait is None else max(0.0, rt.clock() - oldest_wait))
        for outcome, n in rt.stats.approvals.items():
            self._count(self.approvals, n, outcome)
        oldest = await rt.store.oldest_ready_at()
        self.oldest_ready.set(0.0 if oldest is None else max(0.0, rt.clock() - oldest))
        await self._retention()

    async def _retention(self) -> None:
        """Tier sizes and checkpoint figures, at most once per ``retention_ttl_s``."""
        now = time.monotonic()
        if now - self._retention_at < self.retention_ttl_s:
            return
        sizes = await self.rt.store.retention_sizes()
        figures = await self.rt.store.journal.totals(self.rt.clock())
        for tier, size in sizes.items():
            self.tiers.labels(tier).set(size)
        age = figures.last_checkpoint_age_s
        self.checkpoint_age.set(-1.0 if age is None else age)
        self.checkpoint_bytes.set(figures.last_checkpoint_bytes)
        self.recovery.set(figures.recovery_s)
        self._retention_at = now

    async def _store_status(self) -> StoreStatus:
        now = time.monotonic()
        if self._status is None or now - self._status_at >= self.status_ttl_s:
            self._status = await self.rt.store.status()
            self._status_at = now
        return self._status


async def render(exporter: Exporter) -> tuple[bytes, str]:
    """The body and content type of a ``/metrics`` answer (the HTTP server mounts this)."""
    await exporter.refresh()
    return generate_latest(exporter.registry), CONTENT_TYPE_LATEST


async def _answer(exporter: Exporter, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
    except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError, ConnectionError):
        writer.close()
        return
    method, _, rest = head.partition(b" ")
    path = rest.partition(b" ")[0].partition(b"?")[0]
    if method not in (b"GET", b"HEAD") or path not in (b"/metrics", b"/metrics/"):
        status, body, ctype = b"404 Not Found", b"not found: GET /metrics\n", "text/plain"
    else:
        try:
            body, ctype = await render(exporter)
            status = b"200 OK"
        except Exception as exc:  # a failed scrape says so; it never reports stale success
            status, body, ctype = (
                b"503 Service Unavailable",
                f"{type(exc).__name__}: {exc}\n".encode(),
                "text/plain",
            )
    writer.write(
        b"HTTP/1.1 " + status + b"\r\nContent-Type: " + ctype.encode()
        + b"\r\nContent-Length: " + str(len(body)).encode() + b"\r\nConnection: close\r\n\r\n"
        + (b"" if method == b"HEAD" else body)
    )  # fmt: skip
    with contextlib.suppress(ConnectionError):
        await writer.drain()
    writer.close()


@contextlib.asynccontextmanager
async def serving(exporter: Exporter, port: int, host: str = "127.0.0.1") -> AsyncIterator[int]:
    """Serve ``GET /metrics`` on ``host:port`` while inside; yields the bound port (``port`` 0:
    any free one)."""
    server = await asyncio.start_server(
        lambda r, w: _answer(exporter, r, w), host, port, limit=MAX_REQUEST_BYTES
    )
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        server.close()
        await server.wait_closed()
