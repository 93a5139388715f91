"""``dormant bench recall --slices``: recall measured through real agent slices.

Two phases on a SQLite store, with the scripted model:

* **quality** — the seeded suite of the store-level benchmark (:mod:`.recall_suite`) is
  loaded into the runtime's memory; every query that asks about the present is sent
  as a user input of a fresh thread whose sender is the query's subject; the slice's
  automatic recall picks the memories its prompt shows. Graded like the store-level
  benchmark (:func:`.recall_eval.grade`): recall@1/@5, MRR, ``stale_rate``,
  ``leak_rate`` — of what the *prompt* showed.
* **latency** — the tenant is filled to ``memories`` records (``per_subject`` each);
  then ``slices`` one-turn slices run
  alternately on an agent with a subject (recall on) and the same agent without one
  (recall off). Reported: each side's p50 slice latency, the difference, and the p50
  of the recall step itself (registers + recall + sections), which is what the
  slice adds.

Both phases embed with the embedder the run names (``--embedder``): ``minilm``, the
runtime's default (what a user gets: a query's forward pass is part of what recall
adds), or ``hashing``, which stands in for it to measure the runtime's own cost.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from pathlib import Path
from typing import Any

from ..agent import Agent
from ..config import Settings
from ..memory.embedder import Embedder
from ..memory.records import NewMemory
from ..models.base import ModelReply, ModelRequest
from ..models.scripted import ScriptedModel
from ..records import NewInput
from ..runtime import Runtime
from ..slices.memory import Prepared
from ..subject import SubjectOptions
from .recall_eval import bench_embedder, grade, percentile
from .recall_suite import T_END, build_suite

BATCH = 500


def _ok(_: ModelRequest) -> ModelReply:
    return ModelReply(text="ok")


def _agents() -> list[Agent]:
    model = ScriptedModel(_ok)
    return [
        Agent(name="on", model=model, builtins=False, subject=SubjectOptions()),
        Agent(name="text", model=model, builtins=False, subject=SubjectOptions(recall_vectors=False)),
        Agent(name="off", model=model, builtins=False),
    ]


def _settings(path: Path) -> Settings:
    return Settings.build(store=f"sqlite:///{path}", concurrency=8, poll_s=0.01, rss_governor=False)


async def quality(out: Path, *, subjects: int, rich: int, seed: int, embedder: Embedder) -> dict[str, Any]:
    """Phase 1: the suite through slices (see the module docstring)."""
    suite = build_suite(subjects=subjects, rich=rich, seed=seed)
    path = out / "slices-quality.db"
    seen: dict[str, Prepared] = {}
    async with Runtime(
        str(_settings(path).store), _agents(), settings=_settings(path), memory_embedder=embedder
    ) as rt:
        assert rt.runner.loop_memory is not None
        rt.runner.loop_memory.on_prepared = lambda thread, prepared: seen.__setitem__(thread, prepared)
        ids: list[str] = []
        for start in range(0, len(suite.records), BATCH):
            news = [
                NewMemory(subject=r.subject, kind=r.kind, text=r.text, tags=r.tags, valid_from=r.at)
                for r in suite.records[start : start + BATCH]
            ]
            ids += [res.record.id for res in await rt.memory.add_many(news, actor="bench")]
        queries = [q for q in suite.queries if q.at is None]
        items = [
            NewInput(
                thread_id=f"q{i}", kind="user", dedup_key="q", content=q.text, source=q.subject, agent="on"
            )
            for i, q in enumerate(queries)
        ]
        for start in range(0, len(items), BATCH):
            await rt.admit(items[start : start + BATCH])
        await rt.run_until_idle(timeout=3600)
    results = []
    for i, q in enumerate(queries):
        prepared = seen.get(f"q{i}")
        shown = prepared.recalled if prepared is not None else ()
        results.append((q, [rid for rid, _ in shown], [subject for _, subject in shown]))
    figures = grade(results, ids)
    figures["queries"] = len(results)
    figures["records"] = len(suite.records)
    return figures


def embedder_of(name: str) -> Embedder:
    """The embedder a run names: ``minilm`` (the runtime's default), ``multilingual`` or ``hashing``."""
    return bench_embedder(name)


async def latency(
    out: Path, *, memories: int, per_subject: int, slices: int, seed: int, embedder: Embedder
) -> dict[str, Any]:
    """Phase 2: slice latency with recall on against off at ``memories`` records."""
    path = out / "slices-latency.db"
    rng = random.Random(seed)
    subjects: list[str] = []
    async with Runtime(
        str(_settings(path).store), _agents(), settings=_settings(path), memory_embedder=embedder
    ) as rt:
        written = 0
        fill_started = time.perf_counter()
        while written < memories:
            news: list[NewMemory] = []
            while len(news) < BATCH and written + len(news) < memories:
                key = f"b1_{rng.getrandbits(256):064x}"
                subjects.append(key)
                for j in range(min(per_subject, memories - written - len(news))):
                    news.append(
                        NewMemory(
                            subject=key,
                            text=f"Order ORD-{rng.randint(0, 10**8):08d} was dispatched ({j}).",
                            tags={"order": f"ORD-{j}"},
                            kind="event",
                            valid_from=T_END - j * 3600.0,
                        )
                    )
            await rt.memory.add_many(news, actor="bench")
            written += len(news)
        fill_s = time.perf_counter() - fill_started
        on: list[float] = []
        text: list[float] = []
        off: list[float] = []
        timed: list[float] = []
        steps: dict[str, list[float]] = {"on": [], "text": []}
        rt.stats.slice_latency.sinks.append(timed.append)
        step: list[float] = []
        rt.stats.recall_latency.sinks.append(step.append)
        for n in range(slices):
            for agent, sink in (("on", on), ("text", text), ("off", off)):
                subject = rng.choice(subjects)
                item = NewInput(
                    thread_id=f"{agent}{n}",
                    kind="user",
                    dedup_key="k",
                    content="where is my order, was it dispatched?",
                    source=subject if agent != "off" else None,
                    agent=agent,
                )
                timed.clear()
                step.clear()
                await rt.admit([item])
                await rt.run_until_idle(timeout=60)
                sink.extend(timed)
                if agent in steps:
                    steps[agent].extend(step)
    p50_on, p50_off = percentile(on, 50) * 1000, percentile(off, 50) * 1000
    p50_text = percentile(text, 50) * 1000
    return {
        "memories": memories,
        "subjects": len(subjects),
        "fill_s": round(fill_s, 1),
        "slices_each": len(on),
        "slice_p50_ms_recall_on": round(p50_on, 3),
        "slice_p50_ms_recall_off": round(p50_off, 3),
        "slice_p50_added_ms": round(p50_on - p50_off, 3),
        "slice_p50_ms_recall_text_only": round(p50_text, 3),
        "slice_p50_added_ms_text_only": round(p50_text - p50_off, 3),
        "recall_step_p50_ms": round(percentile(steps["on"], 50) * 1000, 3),
        "recall_step_p99_ms": round(percentile(steps["on"], 99) * 1000, 3),
        "recall_step_p50_ms_text_only": round(percentile(steps["text"], 50) * 1000, 3),
        "embedder": embedder.name,
    }


def run(out: Path, params: dict[str, Any]) -> dict[str, Any]:
    """Both phases; writes ``out/slices.json`` and returns it."""
    out.mkdir(parents=True, exist_ok=True)
    embedder = embedder_of(str(params.get("embedder", "minilm")))
    result = {
        "quality": asyncio.run(
            quality(
                out,
                subjects=int(params["subjects"]),
                rich=int(params["rich"]),
                seed=int(params["seed"]),
                embedder=embedder,
            )
        ),
        "latency": asyncio.run(
            latency(
                out,
                memories=int(params["memories"]),
                per_subject=int(params["per_subject"]),
                slices=int(params["slices"]),
                seed=int(params["seed"]),
                embedder=embedder,
            )
        ),
        "embedder": embedder.name,
    }
    (out / "slices.json").write_text(json.dumps(result, indent=2))
    return result
