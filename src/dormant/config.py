"""Settings, validated once at start-up into one frozen object.

Every field can come from a ``DORMANT_*`` environment variable of the same name
in upper case (``concurrency`` ← ``DORMANT_CONCURRENCY``); the CLI shows them in
``--help``.
"""

from __future__ import annotations

import os
from typing import Any, Final, Literal

from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from .errors import UsageError

DEFAULT_STORE = "sqlite:///dormant.db"


#: The retention policies known by name (``DORMANT_RETENTION``, ``Agent(retention=...)``;
#: see :mod:`dormant.retention.policy`): ``keep`` deletes and cuts nothing, ``long-run``
#: applies every tier of docs/retention.md.
RETENTION_POLICIES: Final = ("keep", "long-run")


class Settings(BaseModel):
    """Runtime settings. Bounds are enforced here, not scattered through the code."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    store: str = Field(
        DEFAULT_STORE, description="store URL: sqlite:///path.db, postgresql://user@host/db or memory://"
    )
    synchronous: str = Field("NORMAL", pattern="^(NORMAL|FULL|EXTRA)$", description="SQLite sync")
    concurrency: int = Field(64, ge=1, le=10_000, description="slices running at once (C)")
    tenant_slices: int = Field(
        0,
        ge=0,
        le=100_000,
        description="slices one tenant may run at once over every worker of the store (0: no cap; "
        "claims share slices fairly between tenants either way)",
    )
    tool_concurrency: int = Field(64, ge=1, le=10_000, description="async tool calls at once")
    lease_s: float = Field(30.0, gt=0, le=3600, description="lease length of a claimed thread")
    max_rounds: int = Field(8, ge=1, le=100, description="model rounds per slice (inline tools)")
    max_input_bytes: int = Field(1024 * 1024, ge=1024, description="largest input accepted")
    max_part_bytes: int = Field(
        20 * 1024 * 1024, ge=1024, description="largest image or file part of an input (bytes)"
    )
    max_input_parts_bytes: int = Field(
        50 * 1024 * 1024, ge=1024, description="most bytes of parts one input carries"
    )
    max_thread_day_part_bytes: int = Field(
        500 * 1024 * 1024,
        ge=0,
        description="most bytes of parts one thread takes in a UTC day (0: no limit)",
    )
    part_bytes_in_flight: int = Field(
        64 * 1024 * 1024,
        ge=1024 * 1024,
        description="most bytes of images and files (base64) the model requests in flight in this "
        "process hold; a request waits its turn past it (one larger than it goes alone)",
    )
    max_parts_per_input: int = Field(16, ge=1, le=256, description="most images and files one input carries")
    max_image_pixels: int = Field(
        40_000_000, ge=1024, description="images with more pixels are refused (decompression bombs)"
    )
    image_max_side: int = Field(
        2048, ge=0, description="images are downscaled to this longest side before storing (0: never)"
    )
    max_pdf_pages: int = Field(200, ge=1, description="PDFs with more pages are refused")
    pdf_timeout_s: float = Field(
        20.0,
        gt=0,
        le=600,
        description="seconds a PDF's pages may take to be counted and its text extracted (a child "
        "process; past it the PDF is stored without text, or refused if its pages were not counted)",
    )
    ocr: bool = Field(
        False,
        description="read the text of images at admission with Tesseract (the Debian tesseract-ocr "
        "package; checked at start-up) when the client gave none",
    )
    ocr_languages: str = Field(
        "eng+chi_sim",
        pattern=r"^[A-Za-z0-9_]+(\+[A-Za-z0-9_]+)*$",
        description="Tesseract languages, joined by + (each must be installed: tesseract --list-langs)",
    )
    ocr_timeout_s: float = Field(
        20.0, gt=0, le=600, description="seconds one image's OCR may take (past it: stored without text)"
    )
    ocr_concurrency: int = Field(1, ge=1, le=64, description="images read by OCR at once in this process")
    ocr_max_side: int = Field(
        2048, ge=256, le=10_000, description="images are downscaled to this longest side for OCR"
    )
    extract_memory_bytes: int = Field(
        512 * 1024 * 1024,
        ge=64 * 1024 * 1024,
        description="address space of each OCR or PDF-text child process (bytes; past it the child "
        "fails and the part is stored without text)",
    )
    blob_threshold_bytes: int = Field(
        16 * 1024,
        ge=1024,
        description="tool outputs larger than this are stored as blobs; the model sees an excerpt",
    )
    view_messages: int = Field(64, ge=1, le=10_000, description="messages in a view at most")
    view_bytes: int = Field(256 * 1024, ge=1024, description="bytes of history in a view at most")
    view_tokens: int = Field(
        0, ge=0, description="tokens of history in a view at most (0: what the model's window leaves)"
    )
    prompt_margin: float = Field(
        0.02,
        ge=0,
        le=0.5,
        description="share of the prompt budget (window less output) kept free as a safety margin",
    )
    compaction_share: float = Field(
        0.85,
        ge=0,
        le=10,
        description=(
            "compact a thread when what it wrote since its summary passes this share of what a view "
            "holds: tokens, bytes or messages (0: never)"
        ),
    )
    compaction_keep: float = Field(
        0.2,
        ge=0,
        lt=1,
        description="share of a view (tokens and bytes) kept verbatim after the summary when compacting",
    )
    view_cache_bytes: int = Field(
        24 * 1024 * 1024, ge=0, description="RAM for cached views (0 disables the cache)"
    )
    view_spill_bytes: int = Field(
        256 * 1024 * 1024,
        ge=0,
        description=(
            "disk (an unnamed scratch file) for views evicted from RAM, so a miss decodes the "
            "view instead of rebuilding it (0: off)"
        ),
    )
    model_timeout_s: float = Field(
        300.0,
        gt=0,
        description="seconds a model call may take to its first streamed piece (the server reads "
        "the whole prompt first: long on a CPU)",
    )
    model_stream_timeout_s: float = Field(
        60.0,
        gt=0,
        description=(
            "seconds a streaming model reply may go without a piece before it counts as dead "
            "(it is cut this long after its last piece)"
        ),
    )
    model_check_s: float = Field(
        1.0,
        gt=0,
        le=3600,
        description="seconds between health checks of a model endpoint whose circuit breaker is "
        "open (a healthy answer wakes the threads waiting on it)",
    )
    stop_grace_s: float = Field(
        2.0,
        ge=0,
        le=3600,
        description="on SIGINT/SIGTERM: seconds running slices get to finish before they are "
        "cancelled (their inputs stay pending)",
    )
    model_retries: int = Field(5, ge=0, le=100, description="slice failures before a thread fails")
    tool_attempts: int = Field(5, ge=1, le=100, description="attempts of a retryable async tool")
    retry_base_s: float = Field(0.5, gt=0, description="first retry backoff")
    retry_max_s: float = Field(60.0, gt=0, description="largest retry backoff")
    retry_after_max_s: float = Field(
        600.0, gt=0, description="longest Retry-After honoured (a longer one is cut to it)"
    )
    tool_threads: int = Field(
        32, ge=1, le=1024, description="threads for sync tools (a timed-out sync call keeps its thread)"
    )
    poll_s: float = Field(0.2, gt=0, le=60, description="idle poll interval for new work")
    pg_pool_size: int = Field(
        8, ge=1, le=1000, description="PostgreSQL: read connections per process (+1 writer, +1 listener)"
    )
    worker_id: str | None = Field(None, description="worker name in leases (default host:pid)")
    # the RSS governor (see dormant.governor.levels); shares are fractions of the soft limit. Each
    # rss_* setting also answers to its earlier name, memory_* (DORMANT_MEMORY_*): see RSS_ALIASES
    rss_governor: bool = Field(
        validation_alias=AliasChoices("rss_governor", "memory_governor"),
        default=True,
        description="sample RSS and act on the RSS levels",
    )
    rss_limit: int = Field(
        validation_alias=AliasChoices("rss_limit", "memory_limit"),
        default=0,
        ge=0,
        description="hard RSS limit in bytes, K/M/G suffixes accepted (0: cgroup, else RAM)",
    )
    rss_warn: float = Field(
        validation_alias=AliasChoices("rss_warn", "memory_warn"),
        default=0.60,
        gt=0,
        lt=1,
        description="warn level: share of the soft limit",
    )
    rss_intervene: float = Field(
        validation_alias=AliasChoices("rss_intervene", "memory_intervene"),
        default=0.75,
        gt=0,
        lt=1,
        description="intervene level (stop claiming, shrink caches, halve concurrency)",
    )
    rss_emergency: float = Field(
        validation_alias=AliasChoices("rss_emergency", "memory_emergency"),
        default=0.90,
        gt=0,
        le=1,
        description="emergency level (cancel slices, refuse admissions)",
    )
    rss_hysteresis: float = Field(
        validation_alias=AliasChoices("rss_hysteresis", "memory_hysteresis"),
        default=0.05,
        ge=0,
        lt=0.5,
        description="a level is left only this share of the soft limit below it",
    )
    rss_sample_s: float = Field(
        validation_alias=AliasChoices("rss_sample_s", "memory_sample_s"),
        default=0.1,
        gt=0,
        le=60,
        description="RSS sampling period",
    )
    rss_retry_after_s: float = Field(
        validation_alias=AliasChoices("rss_retry_after_s", "memory_retry_after_s"),
        default=5.0,
        gt=0,
        le=3600,
        description="retry hint of admissions refused over the RSS limit",
    )
    rss_recover_s: float = Field(
        validation_alias=AliasChoices("rss_recover_s", "memory_recover_s"),
        default=1.0,
        gt=0,
        le=3600,
        description="at OK, concurrency climbs back by 1/8 every this many seconds",
    )
    rss_growth_mb_per_min: float = Field(
        validation_alias=AliasChoices("rss_growth_mb_per_min", "memory_growth_mb_per_min"),
        default=50.0,
        gt=0,
        description="RSS growth over the window that lowers the soft limit",
    )
    rss_growth_window_s: float = Field(
        validation_alias=AliasChoices("rss_growth_window_s", "memory_growth_window_s"),
        default=600.0,
        gt=0,
        description="window of the RSS growth rate",
    )
    rss_soft_step: float = Field(
        validation_alias=AliasChoices("rss_soft_step", "memory_soft_step"),
        default=0.10,
        ge=0,
        lt=1,
        description="soft limit change per adaptation",
    )
    rss_soft_min: float = Field(
        validation_alias=AliasChoices("rss_soft_min", "memory_soft_min"),
        default=0.5,
        gt=0,
        le=1,
        description="lowest soft limit (share of the hard)",
    )
    # binding keys (see dormant.memory.binding and docs/memory.md)
    binding_secret: str | None = Field(
        None,
        min_length=32,
        repr=False,
        description="secret binding keys are keyed with (HMAC-SHA256, >= 32 chars; unset: the store's own)",
    )
    binding_secret_previous: str | None = Field(
        None,
        min_length=32,
        repr=False,
        description="the binding secret being rotated out: its keys move to the new ones when next bound",
    )

    # state checkpoints (see dormant.journal.rules): whichever comes first
    checkpoint_incremental_runs: int = Field(3, ge=1, description="incremental checkpoint every N runs")
    checkpoint_incremental_s: float = Field(900.0, gt=0, description="... or every this many seconds")
    checkpoint_full_runs: int = Field(20, ge=1, description="full checkpoint every N runs")
    checkpoint_full_s: float = Field(7200.0, gt=0, description="... or every this many seconds")
    checkpoint_full_increment_bytes: int = Field(
        50 * 1024 * 1024, ge=1, description="... or once the increments since the last full pass this"
    )
    # retention (see dormant.retention.policy): `keep` deletes and cuts nothing; the counts
    # below tune the tiers of a policy that has them (`long-run`, or an agent's own)
    retention: Literal["keep", "long-run"] = Field(
        "keep",
        description="retention policy of agents without their own: keep (nothing deleted or cut) "
        "or long-run (the tiers of docs/retention.md)",
    )
    retention_tool_calls: int = Field(200, ge=1, description="newest tool results per thread kept whole")
    retention_head_chars: int = Field(512, ge=0, description="characters an older tool result keeps")
    retention_parts: int = Field(
        50, ge=1, description="newest images and files per thread kept whole (older: their facts and text)"
    )
    retention_full_runs: int = Field(5, ge=1, description="newest runs keeping every state change")
    retention_metric_runs: int = Field(
        20, ge=0, description="runs before those keeping the last change of each key per run"
    )
    retention_summaries: int = Field(
        2, ge=1, description="newest compaction summaries per thread always kept (older: once unread)"
    )
    retention_budget_bytes: int = Field(
        0, ge=0, description="the store's byte budget; no tier may take more than its share (0: none)"
    )
    retention_tier_share: float = Field(
        0.30, gt=0, le=1, description="largest share of the budget a tier takes"
    )
    retention_interval_s: float = Field(
        60.0, ge=0, description="seconds between background retention passes (0: no background pass)"
    )
    # connections of `dormant serve` (see dormant.server.guard)
    http_header_timeout_s: float = Field(
        10.0, gt=0, le=600, description="seconds a client may take to send a request's line and headers"
    )
    http_body_timeout_s: float = Field(
        60.0, gt=0, le=3600, description="seconds a client may take to send a request's body"
    )
    http_max_header_bytes: int = Field(
        32 * 1024, ge=1024, le=1024 * 1024, description="bytes of a request's line and headers at most"
    )
    http_max_headers: int = Field(100, ge=8, le=1000, description="header lines of a request at most")
    dedup_horizon_s: float = Field(
        7 * 86400.0,
        gt=0,
        description="dedup keys are kept this long; an older redelivery may be admitted again",
    )

    @field_validator("rss_limit", mode="before")
    @classmethod
    def _bytes(cls, value: Any) -> Any:
        """Accept ``512M``, ``2G``, ``100000K`` as well as plain bytes."""
        if isinstance(value, str):
            text = value.strip().upper().removesuffix("B").removesuffix("I")
            scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}.get(text[-1:], 1)
            if scale > 1:
                text = text[:-1]
            try:
                return int(float(text) * scale)
            except ValueError:
                raise ValueError(f"not a byte size: {value!r}") from None
        return value

    @model_validator(mode="after")
    def _levels(self) -> Settings:
        if not self.rss_warn < self.rss_intervene < self.rss_emergency:
            raise ValueError("RSS levels must rise: rss_warn < rss_intervene < rss_emergency")
        if self.rss_hysteresis >= self.rss_warn:
            raise ValueError("rss_hysteresis must be below rss_warn")
        return self

    @classmethod
    def from_env(cls, **overrides: Any) -> Settings:
        """Settings from ``DORMANT_*`` variables, then ``overrides`` (None means unset)."""
        values: dict[str, Any] = {}
        for name in cls.model_fields:
            env = os.environ.get(f"DORMANT_{name.upper()}")
            if (env is None or env == "") and name in RSS_ALIASES:
                env = os.environ.get(f"DORMANT_{RSS_ALIASES[name].upper()}")
            if env is not None and env != "":
                values[name] = env
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls.build(**values)

    @classmethod
    def build(cls, **values: Any) -> Settings:
        """Validate ``values``; raise :class:`UsageError` naming the bad setting."""
        try:
            return cls(**values)
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors())
            raise UsageError(f"invalid settings: {problems}") from None


#: The RSS governor's settings under their earlier names (``memory_limit``,
#: ``DORMANT_MEMORY_LIMIT``, ...), still accepted: "memory" now means long-term memory only.
RSS_ALIASES: dict[str, str] = {
    name: "memory_" + name.removeprefix("rss_") for name in Settings.model_fields if name.startswith("rss_")
}
