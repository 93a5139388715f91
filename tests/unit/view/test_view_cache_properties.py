"""The view cache over random histories: slice after slice, what it serves is a fresh build.

A thread's history is committed in random slices. Before each slice its view is
looked up the way the store core does (:meth:`ViewCache.lookup`); on a miss it is
built from the store and put; after the slice the cache extends it with the slice's
messages (:meth:`ViewCache.advance`). Other threads come and go, so entries are
evicted (to the spill file, when it is on), refused (scan resistance: lent to the
slice, and spilled by its commit) and built again. Whatever path a view took, it
must be the view a fresh build gives at that point, and the usage the cache hands the
slice (what the view weighs against the budget) must be that view's.
"""

from __future__ import annotations

from hypothesis import event, given
from hypothesis import strategies as st

from dormant.records import Message, Thread, ViewLimits
from dormant.view.builder import view_usage
from dormant.view.cache import ViewCache

from .test_context_properties import PROPERTIES, World, check_view, uncounted, view_limits, worlds


def _other(i: int) -> Thread:
    return Thread(id=f"other-{i}", agent="a", last_seq=1)


def _filler(size: int) -> tuple[Message, ...]:
    return (Message(seq=1, role="user", content="x" * size),)


@PROPERTIES
@given(
    world=worlds(),
    limits=view_limits(),
    cuts=st.lists(st.integers(1, 6), min_size=1, max_size=24),
    crowd=st.lists(st.integers(0, 3), min_size=24, max_size=24),
    entries=st.integers(1, 4),
    spill=st.booleans(),
)
def test_a_cached_view_is_always_the_fresh_view(
    world: World, limits: ViewLimits, cuts: list[int], crowd: list[int], entries: int, spill: bool
) -> None:
    own = world.own
    floor = world.summary.upto_seq if world.summary and world.summary.thread_id == world.own_id else 0
    cache = ViewCache(max_bytes=10**9, max_entries=entries, spill_bytes=(1 << 22) if spill else 0)
    k = floor
    hits = 0
    others = 0
    for step, cut in enumerate(cuts):
        row = world.thread(k)
        found = cache.lookup(row, limits)
        fresh, inherited = world.build(limits, last_seq=k)
        check_view(world, limits, fresh, inherited, last_seq=k)
        if found is None:
            cache.put(row, limits, fresh, world.summary, inherited, (world.usage[0], world.usage[1]))
        else:
            hits += 1
            view, summary, got_inherited, usage = found
            assert uncounted(view) == uncounted(fresh), "the cached view is the fresh one"
            assert (summary, got_inherited) == (world.summary, inherited)
            assert usage == view_usage(view, limits.counts_tokens), "its usage is its own"
        # other threads' slices: evictions, and re-admissions the cache may refuse
        for _ in range(crowd[step]):
            others += 1
            other = _other(others % (entries + 2))
            cache.put(other, limits, _filler(10))
        if k >= len(own):
            break
        nxt = min(len(own), k + cut)
        cache.advance(world.own_id, own[k:nxt])
        k = nxt
    event(f"served from the cache: {'some' if hits else 'none'}")
    event(f"served from the spill file: {'some' if cache.spill.hits else 'none'}")
    cache.close()
