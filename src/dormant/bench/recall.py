"""``dormant bench recall``: recall quality on the seeded suite, latency and RSS at large scale.

Run as ``python -m dormant.bench.recall PAYLOAD`` (JSON parameters), one fresh
process per run. Two phases:

1. **Quality** on :mod:`~dormant.bench.recall_suite` (~22,000 records, 10,000
   subjects) embedded with the real model (MiniLM int8; ``embedder=hashing`` for
   tests). Hybrid recall and the five baselines, plus variants that measure the
   design choices (weighted fusion, λ, decay from creation or last access).
   "Without the dictionary" is a second database whose records were embedded
   without the dictionary pull, queried without expansion or pull.
2. **Latency and RSS** at ``memories`` records on SQLite, filled with seeded
   random stand-in vectors (not the model: said so in the summary), recall
   timed at four fill levels so RSS and latency can be read against size.

Writes ``OUT/summary.json`` (keys: recall_at_1, recall_at_5, mrr, stale_rate,
leak_rate, p50_ms, p99_ms, rss_bytes, baselines{...}, and details).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import sys
import time
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path
from typing import Any

import psutil

from ..memory.blocking import blocking_store
from ..memory.core import HYBRID, MemoryConfig, MemoryCore, RecallMode
from ..memory.embedder import Embedder
from ..memory.ranking import Fusion, RankingPolicy
from ..memory.records import DEFAULT_TENANT, MemoryKind, NewMemory, TagValue
from ..store.sqlite import SQLiteStore
from .recall_eval import (
    BENCH_EMBEDDERS,
    CachingEmbedder,
    RandomEmbedder,
    bench_embedder,
    forward_pass_ms,
    percentile,
    run_queries,
)
from .recall_suite import CHANNELS, DICTIONARY, PRODUCTS, SMALL_TALK, STREETS, T0, T_END, Suite, build_suite
from .recall_suite_zh import DICTIONARY_ZH, build_suite_zh

TENANT = DEFAULT_TENANT
SUMMARY_KEYS = (
    "recall_at_1",
    "recall_at_5",
    "mrr",
    "stale_rate",
    "leak_rate",
    "p50_ms",
    "p99_ms",
    "rss_bytes",
)
BATCH = 500
#: the latency phase's fill: records per add_many (the core's maximum) and batches at once
FILL_BATCH = 1000
FILL_IN_FLIGHT = 2
#: the λ sweep (per hour) of the variants
LAMBDAS = (0.00001, 0.0001, 0.001, 0.01)
#: the reciprocal-rank constants of the variants (at the default λ)
RRF_KS = (1.0, 4.0, 10.0, 60.0)


def rss() -> int:
    """This process's resident set size in bytes."""
    return int(psutil.Process().memory_info().rss)


def _fresh(path: Path) -> str:
    for suffix in ("", "-wal", "-shm"):
        with contextlib.suppress(FileNotFoundError):
            os.remove(f"{path}{suffix}")
    return str(path)


def fill_suite(core: MemoryCore, suite: Suite) -> list[str]:
    """Add the suite's records in batches; the stored id of each suite record (duplicates merged)."""
    ids: list[str] = []
    for start in range(0, len(suite.records), BATCH):
        batch = suite.records[start : start + BATCH]
        news = [
            NewMemory(subject=r.subject, kind=r.kind, text=r.text, tags=r.tags, valid_from=r.at)
            for r in batch
        ]
        ids += [res.record.id for res in core.add_many(TENANT, news, actor="bench", now=T_END)]
    return ids


def _core(stack: ExitStack, path: Path, embedder: Embedder, config: MemoryConfig) -> MemoryCore:
    """A MemoryCore over a fresh SQLite store at ``path`` (its loop on a thread, closed with ``stack``)."""
    store = stack.enter_context(blocking_store(SQLiteStore(f"sqlite:///{_fresh(path)}")))
    return MemoryCore(store.memory_rows(), embedder, config)


def quality(params: dict[str, Any], out: Path) -> dict[str, Any]:
    """Phase 1: the suite, hybrid and baselines, variants."""
    with ExitStack() as stack:
        return _quality(params, out, stack)


def _quality(params: dict[str, Any], out: Path, stack: ExitStack) -> dict[str, Any]:
    suite = build_suite(subjects=int(params["subjects"]), rich=int(params["rich"]), seed=int(params["seed"]))
    rss_before = rss()
    inner: Embedder = bench_embedder(str(params["embedder"]))
    embedder = CachingEmbedder(inner)
    config = MemoryConfig(touch_on_recall=False)
    with_dict = _core(stack, out / "quality.db", embedder, config)
    no_dict = _core(stack, out / "quality_nodict.db", embedder, config)
    with_dict.save_dictionary(TENANT, DICTIONARY)
    t = time.perf_counter()
    ids = fill_suite(with_dict, suite)
    fill_s = time.perf_counter() - t
    rss_loaded = rss()
    ids_nodict = fill_suite(no_dict, suite)
    # the design choice the default replaced: records' vectors pulled towards their groups too
    pulled_config = replace(config, pull_records=not config.pull_records)
    pulled = _core(stack, out / "quality_pull_records.db", embedder, pulled_config)
    pulled.save_dictionary(TENANT, DICTIONARY)
    ids_pulled = fill_suite(pulled, suite)
    # the model's forward pass per query, one distinct query at a time (as queries come)
    embed_times = forward_pass_ms(inner, [q.text for q in suite.queries])
    # embed every query once up front so each pass times recall, not the model
    t = time.perf_counter()
    with_dict.embedder.embed([q.text for q in suite.queries]) if with_dict.embedder else None
    query_embed_ms = (time.perf_counter() - t) * 1000 / max(1, len(suite.queries))
    queries = suite.queries
    text_only = RecallMode(vector=False)
    runs: dict[str, Any] = {
        "hybrid": run_queries(with_dict, queries, ids, HYBRID),
        "previous_default": run_queries(with_dict, queries, ids, PREVIOUS),
        "hybrid_no_structure": run_queries(with_dict, queries, ids, NO_STRUCTURE),
        "fulltext_only_no_structure": run_queries(
            with_dict, queries, ids, RecallMode(vector=False, structure=False)
        ),
        "recency_only": run_queries(with_dict, queries, ids, RecallMode(text=False, vector=False)),
        "fulltext_only": run_queries(with_dict, queries, ids, text_only),
        "vector_only": run_queries(with_dict, queries, ids, RecallMode(text=False)),
        "hybrid_no_decay": run_queries(
            with_dict, queries, ids, RecallMode(ranking=RankingPolicy(use_decay=False))
        ),
        "hybrid_no_dictionary": run_queries(no_dict, queries, ids_nodict, RecallMode(dictionary=False)),
    }
    variants: dict[str, Any] = {
        f"pull_records_{pulled_config.pull_records}": run_queries(pulled, queries, ids_pulled, HYBRID)
    }
    families: tuple[tuple[Fusion, float], ...] = (
        ("rrf", RankingPolicy().rrf_k),
        ("rrf", 60.0),
        ("weighted", 0.0),
    )
    for fusion, rrf_k in families:
        for lam in LAMBDAS:
            policy = RankingPolicy(fusion=fusion, rrf_k=rrf_k or 60.0, default_lambda=lam)
            name = f"{fusion}{f'_k{rrf_k:g}' if rrf_k else ''}_lambda_{lam:g}"
            variants[name] = run_queries(with_dict, queries, ids, RecallMode(ranking=policy))
    for rrf_k in RRF_KS:
        policy = RankingPolicy(rrf_k=rrf_k)
        variants[f"rrf_k{rrf_k:g}"] = run_queries(with_dict, queries, ids, RecallMode(ranking=policy))
    # decay from the last access: first let a realistic pass of earlier recalls touch records
    # (each rich subject's most recent five, at a random moment), then compare
    toucher = MemoryCore(with_dict.backend, embedder, MemoryConfig(touch_on_recall=True))
    rng = random.Random(int(params["seed"]))
    for key in suite.subjects[: int(params["rich"])]:
        toucher.recall(TENANT, [key], "", k=5, now=T0 + rng.uniform(0.5, 1.0) * (T_END - T0))
    toucher.flush()
    for lam in (0.001,):
        for source in ("created", "access"):
            policy = RankingPolicy(default_lambda=lam, decay_from=source)
            variants[f"decay_from_{source}_lambda_{lam:g}"] = run_queries(
                with_dict, queries, ids, RecallMode(ranking=policy)
            )
    per_category = {
        "hybrid": runs["hybrid"].by_category(ids),
        "previous_default": runs["previous_default"].by_category(ids),
        "fulltext_only_no_structure": runs["fulltext_only_no_structure"].by_category(ids),
        "hybrid_no_decay": runs["hybrid_no_decay"].by_category(ids),
        "hybrid_no_dictionary": runs["hybrid_no_dictionary"].by_category(ids_nodict),
        "fulltext_only": runs["fulltext_only"].by_category(ids),
        "vector_only": runs["vector_only"].by_category(ids),
    }
    for core in (with_dict, no_dict, pulled):
        core.backend.close()
    zh = chinese(params, out, stack, embedder, config)
    return {
        "zh": zh,
        "runs": runs,
        "variants": variants,
        "per_category": per_category,
        "records": len(suite.records),
        "stored_records": len(set(ids)),
        "subjects": len(suite.subjects),
        "shared_phone_pairs": suite.shared_phone_pairs,
        "queries": len(queries),
        "embedder": inner.name,
        "embed_texts_per_s": round(embedder.model_texts / max(1e-9, embedder.model_seconds), 1),
        "fill_s": round(fill_s, 2),
        "query_embed_ms": round(query_embed_ms, 3),
        "query_embed_p50_ms": round(percentile(embed_times, 50), 3),
        "query_embed_p99_ms": round(percentile(embed_times, 99), 3),
        "rss_embedder_loaded_bytes": rss_loaded,
        "rss_embedder_delta_bytes": rss_loaded - rss_before,
    }


NO_STRUCTURE = RecallMode(structure=False)
#: "before": the previous default, ranking alone (no structure first, no recency
#: fallback) with the previous decay, λ = 0.001 per hour
PREVIOUS = RecallMode(structure=False, ranking=RankingPolicy(default_lambda=0.001))


def chinese(
    params: dict[str, Any], out: Path, stack: ExitStack, embedder: Embedder, config: MemoryConfig
) -> dict[str, Any]:
    """The Chinese suite (:mod:`~dormant.bench.recall_suite_zh`) on a database of its own:
    hybrid and full text, each with and without structure first, per category."""
    suite = build_suite_zh(
        subjects=int(params["zh_subjects"]), rich=int(params["zh_rich"]), seed=int(params["seed"])
    )
    core = _core(stack, out / "quality_zh.db", embedder, config)
    core.save_dictionary(TENANT, DICTIONARY_ZH)
    ids = fill_suite(core, suite)
    inner = embedder.inner if isinstance(embedder, CachingEmbedder) else embedder
    embed_times = forward_pass_ms(inner, [q.text for q in suite.queries])
    modes = {
        "hybrid": HYBRID,
        "previous_default": PREVIOUS,
        "hybrid_no_structure": NO_STRUCTURE,
        "fulltext_only": RecallMode(vector=False),
        "fulltext_only_no_structure": RecallMode(vector=False, structure=False),
    }
    graded = {name: run_queries(core, suite.queries, ids, mode) for name, mode in modes.items()}
    core.backend.close()
    return {
        "runs": {name: g.as_json() for name, g in graded.items()},
        "per_category": {name: g.by_category(ids) for name, g in graded.items()},
        "records": len(suite.records),
        "subjects": len(suite.subjects),
        "queries": len(suite.queries),
        "query_embed_p50_ms": round(percentile(embed_times, 50), 3),
        "query_embed_p99_ms": round(percentile(embed_times, 99), 3),
    }


def _synthetic(rng: random.Random, subject: str, n: int, t0: float) -> list[NewMemory]:
    out = []
    for j in range(n):
        r = rng.random()
        kind: MemoryKind = "event"
        tags: dict[str, TagValue] = {}
        if r < 0.15:
            text, kind = f"Please ship my orders to {rng.randint(1, 999)} {rng.choice(STREETS)}.", "fact"
            tags = {"key": "shipping_address"}
        elif r < 0.25:
            text, kind = f"Please use {rng.choice(CHANNELS)} from now on.", "preference"
            tags = {"key": "contact_channel"}
        elif r < 0.8:
            o = f"ORD-{rng.randint(0, 99_999_999):08d}"
            text, tags = f"Order {o} for the {rng.choice(PRODUCTS)} was dispatched.", {"order": o}
        else:
            text = rng.choice(SMALL_TALK).format(city=rng.choice(STREETS)) + f" ({j})"
        out.append(NewMemory(subject=subject, kind=kind, text=text, tags=tags, valid_from=t0 + j * 3600.0))
    return out


def latency(params: dict[str, Any], out: Path, progress: bool) -> dict[str, Any]:
    """Phase 2: fill to ``memories`` records; time recall at four fill levels."""
    with ExitStack() as stack:
        return _latency(params, out, progress, stack)


def _latency(params: dict[str, Any], out: Path, progress: bool, stack: ExitStack) -> dict[str, Any]:
    total = int(params["memories"])
    per_subject = int(params["per_subject"])
    n_queries = int(params["latency_queries"])
    core = _core(stack, out / "latency.db", RandomEmbedder(384), MemoryConfig())
    rng = random.Random(int(params["seed"]) + 1)
    subjects: list[str] = []
    pending: list[NewMemory] = []
    checkpoints = sorted({max(1, total * q // 4) for q in (1, 2, 3, 4)})
    points = []
    max_s = float(params.get("latency_seconds", DEFAULTS["latency_seconds"]))
    t_fill = time.perf_counter()
    fill_s = 0.0
    # FILL_IN_FLIGHT batches at once: one is built and embedded while the store's writer
    # commits the other (the writer group-commits what is queued together)
    fill = stack.enter_context(ThreadPoolExecutor(FILL_IN_FLIGHT, thread_name_prefix="bench-fill"))
    in_flight: list[Future[Any]] = []
    queued = 0
    while queued < total:
        key = f"b1_{rng.getrandbits(256):064x}"
        subjects.append(key)
        pending += _synthetic(rng, key, min(per_subject, total - queued - len(pending)), T0)
        while len(pending) >= FILL_BATCH or (pending and queued + len(pending) >= total):
            size = min(FILL_BATCH, checkpoints[0] - queued) if checkpoints else FILL_BATCH
            batch, pending = pending[:size], pending[size:]
            if len(in_flight) >= FILL_IN_FLIGHT:
                in_flight.pop(0).result()
            in_flight.append(fill.submit(core.add_many, TENANT, batch, actor="bench", now=T_END))
            queued += len(batch)
            if progress:
                print(f"progress {queued} {total}", flush=True)
            if checkpoints and queued >= checkpoints[0]:
                for done in in_flight:
                    done.result()
                in_flight.clear()
                checkpoints.pop(0)
                fill_s += time.perf_counter() - t_fill
                points.append(_measure(core, subjects, rng, n_queries, queued, max_s))
                t_fill = time.perf_counter()
    fill_s += time.perf_counter() - t_fill
    db = sum(
        os.path.getsize(f"{out / 'latency.db'}{s}")
        for s in ("", "-wal")
        if os.path.exists(f"{out / 'latency.db'}{s}")
    )
    core.flush()
    core.backend.close()
    return {
        "points": points,
        "insert_per_s": round(total / max(1e-9, fill_s), 1),
        "db_bytes": db,
        "subjects": len(subjects),
        "embeddings": "seeded random 384-d unit vectors stand in for the model (latency only)",
    }


QUERY_WORDS = [
    "where",
    "ship",
    "order",
    "dispatched",
    "channel",
    "email",
    "address",
    "shoes",
    "weather",
    "courier",
]


def _measure(
    core: MemoryCore, subjects: list[str], rng: random.Random, n: int, records: int, max_s: float
) -> dict[str, Any]:
    """``n`` recalls of random subjects (fewer if ``max_s`` seconds pass first)."""
    times: list[float] = []
    deadline = time.perf_counter() + max_s
    for _ in range(n):
        if times and time.perf_counter() > deadline:
            break
        q = " ".join(rng.sample(QUERY_WORDS, 3))
        key = rng.choice(subjects)
        t = time.perf_counter()
        core.recall(TENANT, [key], q, k=5, now=T_END)
        times.append((time.perf_counter() - t) * 1000)
    return {
        "records": records,
        "queries": len(times),
        "p50_ms": round(percentile(times, 50), 3),
        "p99_ms": round(percentile(times, 99), 3),
        "rss_bytes": rss(),
    }


def run(params: dict[str, Any], *, progress: bool = False) -> dict[str, Any]:
    """Both phases; writes and returns the summary."""
    out = Path(params["out"])
    out.mkdir(parents=True, exist_ok=True)
    q = quality(params, out)
    # the quality figures on their own first: the latency phase is long at 1 M records
    (out / "quality.json").write_text(
        json.dumps(
            {
                "runs": {k: v.as_json() for k, v in q["runs"].items()},
                "variants": {k: v.as_json() for k, v in q["variants"].items()},
                **{k: v for k, v in q.items() if k not in ("runs", "variants")},
            },
            indent=2,
        )
        + "\n"
    )
    lat = latency(params, out, progress)
    hybrid = q["runs"]["hybrid"].as_json()
    last = lat["points"][-1]
    summary: dict[str, Any] = {k: hybrid[k] for k in SUMMARY_KEYS[:5]}
    summary.update({"p50_ms": last["p50_ms"], "p99_ms": last["p99_ms"], "rss_bytes": last["rss_bytes"]})
    baselines = {}
    for name in (
        "previous_default",
        "hybrid_no_structure",
        "recency_only",
        "fulltext_only",
        "fulltext_only_no_structure",
        "vector_only",
        "hybrid_no_decay",
        "hybrid_no_dictionary",
    ):
        fig = q["runs"][name].as_json()
        # latency of a baseline: its own per-query time on the quality database
        baselines[name] = {
            **{k: fig[k] for k in SUMMARY_KEYS[:5]},
            "p50_ms": fig["p50_ms"],
            "p99_ms": fig["p99_ms"],
            "rss_bytes": last["rss_bytes"],
        }
    summary["baselines"] = baselines
    summary["per_category"] = {
        "en": {k: q["per_category"][k] for k in ("hybrid", "previous_default")},
        "zh": {k: q["zh"]["per_category"][k] for k in ("hybrid", "previous_default")},
    }
    summary["zh"] = q["zh"]["runs"]
    summary["details"] = {
        "quality": {
            **{k: v for k, v in q.items() if k not in ("runs", "variants")},
            "hybrid": hybrid,
            "variants": {k: v.as_json() for k, v in q["variants"].items()},
        },
        "latency": lat,
        "notes": [
            "quality figures: suite recall at k=5 with the embedder named in details.quality.embedder",
            "p50_ms/p99_ms/rss_bytes: recall at details.latency.points[-1].records records on SQLite, "
            "with seeded random vectors standing in for the model; rss_bytes includes the loaded embedder",
            "baseline p50_ms/p99_ms are measured on the quality database (suite scale)",
        ],
        "params": params,
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2, sort_keys=False) + "\n")
    return summary


DEFAULTS: dict[str, Any] = {
    "subjects": 10_000,
    "rich": 600,
    #: the Chinese suite's subjects and subjects with a history
    "zh_subjects": 2_000,
    "zh_rich": 300,
    "seed": 7,
    "embedder": "minilm",
    "memories": 1_000_000,
    "per_subject": 20,
    "latency_queries": 1000,
    #: each latency point stops timing after this many seconds (with fewer queries)
    "latency_seconds": 120.0,
}


def main() -> None:
    """``python -m dormant.bench.recall '{"out": ..., ...}'``."""
    params = {**DEFAULTS, **json.loads(sys.argv[1])}
    run(replace_params(params), progress=True)


def replace_params(params: dict[str, Any]) -> dict[str, Any]:
    """Validated parameters."""
    if int(params["memories"]) < 100:
        raise SystemExit("memories must be at least 100")
    if params["embedder"] not in BENCH_EMBEDDERS:
        raise SystemExit(f"embedder must be one of {', '.join(BENCH_EMBEDDERS)}")
    return params


if __name__ == "__main__":
    main()

__all__ = ["replace", "run"]
