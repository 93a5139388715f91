"""The userspace slow/lossy link: its delay and loss arithmetic, order, and a real proxied stream."""

from __future__ import annotations

import asyncio
import random
import statistics

import pytest

from dormant.bench.netem import MIN_RTO_S, SYN_RTO_S, Direction, Link, Proxy, connect_delay


def test_a_clean_link_releases_at_once_and_in_order() -> None:
    way = Direction(random.Random(1))
    assert way.release(10.0, 100, None) == 10.0
    assert way.release(10.5, 100, None) == 10.5
    assert way.stats.delayed == 0 and way.stats.chunks == 2 and way.stats.bytes == 200


def test_delay_is_within_the_jitter_and_averages_the_delay() -> None:
    link = Link(delay_s=0.2, jitter_s=0.05, loss=0.0)
    held = []
    for n in range(2000):
        way = Direction(random.Random(n))  # one chunk per direction: no order effect
        held.append(way.release(0.0, 100, link))
    assert min(held) >= 0.15 and max(held) <= 0.25
    assert statistics.mean(held) == pytest.approx(0.2, abs=0.005)
    assert statistics.pstdev(held) > 0.02  # spread over the jitter, not a constant


def test_a_chunk_is_never_released_before_the_one_read_before_it() -> None:
    link = Link(delay_s=0.2, jitter_s=0.05, loss=0.1)
    way = Direction(random.Random(7))
    times = [way.release(t * 0.001, 100, link) for t in range(5000)]
    assert times == sorted(times)
    # ...and a stalled one holds back those behind it (head-of-line blocking)
    assert way.stats.stalls > 0 and way.stats.max_held_s > link.delay_s + link.jitter_s


def test_about_one_chunk_in_ten_stalls_for_at_least_a_retransmission_timeout() -> None:
    link = Link(delay_s=0.2, jitter_s=0.05, loss=0.1)
    assert link.rto == pytest.approx(0.6)  # 2 x 0.2 + 4 x 0.05: this link's SRTT + 4 RTTVAR
    rng = random.Random(3)
    stalled = 0
    for _ in range(10_000):
        way = Direction(rng)
        if way.release(0.0, 100, link) > 0.25:
            stalled += 1
            assert way.stats.max_stall_s >= link.rto
    assert 900 <= stalled <= 1100


def test_a_big_chunk_loses_some_segment_more_often() -> None:
    link = Link(delay_s=0.01, jitter_s=0.0, loss=0.1)
    rng = random.Random(5)
    way = Direction(rng)
    for _ in range(4000):
        way.last = float("-inf")
        way.release(0.0, 10 * link.mss, link)
    # 1 - 0.9 ** 10 = 0.65 of ten-segment chunks lose one
    assert way.stats.stalls / 4000 == pytest.approx(1 - 0.9**10, abs=0.03)


def test_a_lost_retransmission_doubles_the_timeout() -> None:
    class Seq(random.Random):
        def __init__(self, draws: list[float]) -> None:
            super().__init__(0)
            self.draws = draws

        def random(self) -> float:
            return self.draws.pop(0)

    link = Link(delay_s=0.2, jitter_s=0.0, loss=0.1)
    assert link.rto == pytest.approx(0.4)
    # lost, its retransmission lost twice, the third gets through: 0.4 + 0.8 + 1.6
    wait, lost = link.stall(Seq([0.05, 0.05, 0.5]), link.rto)
    assert lost == 3 and wait == pytest.approx(2.8)
    capped = Link(delay_s=0.2, jitter_s=0.0, loss=0.1, max_rto_s=1.0)
    assert capped.stall(Seq([0.05, 0.05, 0.5]), capped.rto)[0] == pytest.approx(0.4 + 0.8 + 1.0)
    assert Link(delay_s=0.01, jitter_s=0.0).rto == MIN_RTO_S
    # (the first draw is the jitter) a lost SYN costs Linux's initial timeout
    assert connect_delay(Seq([0.5, 0.05, 0.5]), link) == pytest.approx(0.2 + SYN_RTO_S)
    assert connect_delay(random.Random(0), None) == 0.0


def test_bad_links_are_refused() -> None:
    for bad in (0.3, 1.0, -0.1, 0.0):
        with pytest.raises(ValueError):
            if bad == 0.3:
                Link(jitter_s=bad)
            elif bad == 0.0:
                Link(rto_s=bad)
            else:
                Link(loss=bad)
    with pytest.raises(ValueError):
        Link(mss=0)


async def test_the_proxy_forwards_a_stream_intact_delayed_only_while_impaired() -> None:
    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(echo, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    proxy = Proxy(("127.0.0.1", port), Link(delay_s=0.1, jitter_s=0.02, loss=0.2), seed=11)
    listen = await proxy.start("127.0.0.1", 0)
    loop = asyncio.get_running_loop()

    async def round_trip(payload: bytes) -> tuple[bytes, float]:
        reader, writer = await asyncio.open_connection("127.0.0.1", listen)
        began = loop.time()
        writer.write(payload)
        await writer.drain()
        writer.write_eof()
        got = await reader.read(-1)
        writer.close()
        return got, loop.time() - began

    try:
        payload = b"".join(n.to_bytes(4, "big") for n in range(200_000))  # 800 kB, many chunks
        got, clean_s = await round_trip(payload)
        assert got == payload and clean_s < 0.2
        proxy.impair()
        got, slow_s = await round_trip(payload)
        assert got == payload, "delayed and stalled, never cut, duplicated or reordered"
        assert slow_s >= 0.16  # at least one delay each way
        assert proxy.stats.delayed > 0 and proxy.stats.connections == 2
    finally:
        await proxy.close()
        server.close()
