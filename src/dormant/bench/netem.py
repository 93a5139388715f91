"""A slow and lossy link in userspace: a TCP proxy that delays and stalls what it forwards.

``tc qdisc ... netem`` needs the ``sch_netem`` kernel module, which some kernels lack
(``Specified qdisc kind is unknown``). :class:`Proxy` stands in for it on one TCP path:
it listens on a loopback address, connects each client to ``upstream`` and forwards the
bytes both ways, each direction of each connection through a :class:`Direction` that
decides when each chunk read may be written on.

What is emulated, while the proxy is impaired (:meth:`Proxy.impair`):

* **delay**: every chunk, in each direction, is held ``delay_s ± jitter_s`` (uniform, as
  netem's default distribution), and a chunk is never written before the one read
  before it (TCP delivers in order: jitter delays the stream, it does not reorder it);
* **loss, as TCP experiences it**: a chunk of ``n`` segments (``mss`` bytes each) loses
  one with probability ``1 - (1 - loss) ** n``; a loss costs a retransmission timeout
  (``rto_s``, by default ``max(0.2, 2 x delay_s + 4 x jitter_s)``: RFC 6298's
  ``SRTT + 4 x RTTVAR`` for this link, floored at Linux's 200 ms minimum), and the
  retransmission is itself lost with probability ``loss``, each time doubling the
  timeout (exponential backoff, capped at ``max_rto_s``). Every later chunk of that
  direction waits behind the stalled one (head-of-line blocking);
* **connection set-up**: the connection to ``upstream`` is made after one sampled delay,
  and a lost SYN costs one second (Linux's initial RTO), doubling likewise.

What is NOT emulated: bytes are never dropped, duplicated or reordered on the stream (a
proxy in the middle of a TCP stream cannot do that without breaking it; TCP would hide
them from the application anyway); congestion control (the shrinking window and lower
throughput after a loss; the optional ``tbf`` bandwidth cap of
:func:`dormant.bench.netns.Net.limit` is the nearest thing); per-segment timing inside a
chunk (a chunk is delayed as a whole); the kernel's TCP between the proxy and its peers
runs on clean links, so keepalives, zero windows and RSTs are not delayed; a FIN is
forwarded after the data before it, with that data's delay.

Bounds: at most ``max_conns`` connections (more are closed at once) and ``queue`` chunks of
at most ``chunk`` bytes held per direction (a full queue stops reading: back-pressure, as
a closed TCP window would).

    python -m dormant.bench.netem '{"listen": "127.0.0.1:15432", "upstream": "10.0.0.1:5432"}'

runs one until SIGTERM (printing ``READY`` once listening): SIGUSR1 impairs it, SIGUSR2
restores a clean link; ``stats`` (a path) receives its counters as JSON at exit.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import random
import signal
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

#: Linux's minimum retransmission timeout, and its initial one (a SYN's)
MIN_RTO_S = 0.2
SYN_RTO_S = 1.0


@dataclass(frozen=True, slots=True)
class Link:
    """What an impaired link does: delay, jitter, loss (per segment) and the timeout a loss costs."""

    delay_s: float = 0.2
    jitter_s: float = 0.05
    loss: float = 0.10
    #: None: ``max(MIN_RTO_S, 2 x delay_s + 4 x jitter_s)``
    rto_s: float | None = None
    max_rto_s: float = 120.0
    mss: int = 1448

    def __post_init__(self) -> None:
        if self.delay_s < 0 or self.jitter_s < 0 or self.jitter_s > self.delay_s:
            raise ValueError("need 0 <= jitter_s <= delay_s")
        if not 0 <= self.loss < 1:
            raise ValueError("loss is a probability below 1")
        if self.mss < 1 or self.max_rto_s <= 0 or (self.rto_s is not None and self.rto_s <= 0):
            raise ValueError("mss, rto_s and max_rto_s must be positive")

    @property
    def rto(self) -> float:
        """The first retransmission timeout of a lost segment."""
        if self.rto_s is not None:
            return self.rto_s
        return max(MIN_RTO_S, 2 * self.delay_s + 4 * self.jitter_s)

    def stall(self, rng: random.Random, rto: float) -> tuple[float, int]:
        """A loss: the time until a retransmission gets through, and how many were lost
        (the first one, then each retransmission lost with probability ``loss``)."""
        lost, wait, timeout = 1, 0.0, rto
        while True:
            wait += min(timeout, self.max_rto_s)
            timeout *= 2
            if rng.random() >= self.loss:
                return wait, lost
            lost += 1


@dataclass(slots=True)
class Stats:
    """Counters of one proxy (all connections, both directions)."""

    connections: int = 0
    refused: int = 0
    chunks: int = 0
    bytes: int = 0
    delayed: int = 0
    losses: int = 0
    stalls: int = 0
    stall_s: float = 0.0
    max_stall_s: float = 0.0
    max_held_s: float = 0.0


@dataclass(slots=True)
class Direction:
    """When each chunk of one direction of one connection may be written on.

    :meth:`release` is pure arithmetic on the times given (and ``rng``), so it is tested
    without sockets: a chunk's release is never before the previous chunk's (order), and
    is ``now`` on a clean link (``link`` None).
    """

    rng: random.Random
    stats: Stats = field(default_factory=Stats)
    last: float = float("-inf")

    def release(self, now: float, nbytes: int, link: Link | None) -> float:
        """The time the chunk of ``nbytes`` read at ``now`` is written on."""
        self.stats.chunks += 1
        self.stats.bytes += nbytes
        at = now
        if link is not None:
            self.stats.delayed += 1
            at += link.delay_s + self.rng.uniform(-link.jitter_s, link.jitter_s)
            segments = max(1, math.ceil(nbytes / link.mss))
            if self.rng.random() < 1 - (1 - link.loss) ** segments:
                wait, lost = link.stall(self.rng, link.rto)
                at += wait
                self.stats.stalls += 1
                self.stats.losses += lost
                self.stats.stall_s += wait
                self.stats.max_stall_s = max(self.stats.max_stall_s, wait)
        at = max(at, self.last)
        self.stats.max_held_s = max(self.stats.max_held_s, at - now)
        self.last = at
        return at


def connect_delay(rng: random.Random, link: Link | None) -> float:
    """How long a new connection's set-up takes on ``link`` (a SYN lost: one second, doubling)."""
    if link is None:
        return 0.0
    wait = link.delay_s + rng.uniform(-link.jitter_s, link.jitter_s)
    if rng.random() < link.loss:
        wait += link.stall(rng, SYN_RTO_S)[0]
    return wait


class Proxy:
    """Forwards ``listen`` to ``upstream``, through ``link`` while impaired (see the module doc)."""

    def __init__(
        self,
        upstream: tuple[str, int],
        link: Link,
        *,
        seed: int | None = None,
        max_conns: int = 256,
        queue: int = 64,
        chunk: int = 64 * 1024,
    ) -> None:
        self.upstream, self.link = upstream, link
        self.rng = random.Random(seed)
        self.stats = Stats()
        self.max_conns, self.queue, self.chunk = max_conns, queue, chunk
        self.impaired = False
        self._open = 0
        self._server: asyncio.Server | None = None

    def impair(self, on: bool = True) -> None:
        """Impair the link (``on``) or make it clean again; applies to chunks read from now on."""
        self.impaired = on

    @property
    def current(self) -> Link | None:
        """The link chunks read now go through (None: clean)."""
        return self.link if self.impaired else None

    async def start(self, host: str, port: int) -> int:
        """Listen on ``host:port`` (0: any free port); the port."""
        self._server = await asyncio.start_server(self._serve, host, port)
        return int(self._server.sockets[0].getsockname()[1])

    async def close(self) -> None:
        """Stop listening (open connections end with their peers)."""
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 1)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._open >= self.max_conns:
            self.stats.refused += 1
            writer.close()
            return
        self._open += 1
        self.stats.connections += 1
        try:
            await asyncio.sleep(connect_delay(self.rng, self.current))
            try:
                up_reader, up_writer = await asyncio.open_connection(*self.upstream)
            except OSError:
                writer.close()
                return
            await asyncio.gather(
                self._pump(reader, up_writer, writer),
                self._pump(up_reader, writer, up_writer),
                return_exceptions=True,
            )
            for w in (writer, up_writer):
                w.close()
        finally:
            self._open -= 1

    async def _pump(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, source: asyncio.StreamWriter
    ) -> None:
        """One direction: read chunks from ``reader``, write each to ``writer`` at its release
        time, in order; when ``writer``'s peer is gone, ``source`` (``reader``'s socket) is
        closed too, so the connection ends both ways."""
        loop = asyncio.get_running_loop()
        way = Direction(self.rng, self.stats)
        held: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue(self.queue)

        async def write() -> None:
            while True:
                at, data = await held.get()
                await asyncio.sleep(max(0.0, at - loop.time()))
                if not data:
                    with contextlib.suppress(OSError):
                        writer.write_eof()
                    return
                try:
                    writer.write(data)
                    await writer.drain()
                except OSError:
                    source.close()
                    return

        writing = asyncio.create_task(write())
        try:
            while not writing.done():
                data = await reader.read(self.chunk)
                await held.put((way.release(loop.time(), max(1, len(data)), self.current), data))
                if not data:
                    break
            await writing
        except (OSError, asyncio.IncompleteReadError):
            writing.cancel()
            writer.close()
        finally:
            if not writing.done():
                writing.cancel()


def _addr(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host, int(port)


async def main(config: dict[str, Any]) -> None:
    """Run one proxy until SIGTERM (see the module doc)."""
    link = Link(**{k: config[k] for k in ("delay_s", "jitter_s", "loss", "rto_s", "mss") if k in config})
    proxy = Proxy(_addr(config["upstream"]), link, seed=config.get("seed"))
    proxy.impaired = bool(config.get("impaired", False))
    host, port = _addr(config["listen"])
    await proxy.start(host, port)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGUSR1, proxy.impair, True)
    loop.add_signal_handler(signal.SIGUSR2, proxy.impair, False)
    print("READY", flush=True)
    await stop.wait()
    if config.get("stats"):
        Path(config["stats"]).write_text(json.dumps({"link": asdict(link), **asdict(proxy.stats)}))
    await proxy.close()


if __name__ == "__main__":
    asyncio.run(main(json.loads(sys.argv[1])))
