"""``dormant bench hosts``: worker hosts on their own network namespaces against one PostgreSQL.

:func:`run_scenario` builds the hosts (:class:`~dormant.bench.netns.Net`): ``db`` (the
primary), ``db2`` (a streaming standby, for ``failover``) and three workers ``w1``..``w3``
(:mod:`~dormant.bench.hosts_worker`), joined by a bridge. The harness, on the bridge,
admits a new turn to every thread at a steady rate (an admission that raised is retried
with the same dedup key), makes the scenario's fault, keeps the load on for a while,
stops admitting, waits until every acknowledged input is answered, stops the workers
and checks (:func:`check`) from the store and the workers' ledgers.

Scenarios (``SCENARIOS``):

* ``partition``: ``w1``'s link cut for ``partition_s`` (longer than the lease), then healed;
* ``restart-fast`` / ``restart-immediate``: the primary restarted mid-commits;
* ``failover``: the primary stopped (immediate) and the standby promoted; the workers'
  URL names both hosts with ``target_session_attrs=read-write``; synchronous replication
  (``synchronous_standby_names``) on unless ``sync=False``;
* ``kill9``: ``w1`` killed with SIGKILL (and restarted after the lease);
* ``slow``: ``w1``'s path to the database made slow and lossy for ``slow_s`` (by default
  200 ± 50 ms each way and 10 % loss, as TCP experiences it: a retransmission stall), then
  clean again. ``w1`` reaches the database through :mod:`~dormant.bench.netem`, a proxy on
  its own host's loopback, from the start (clean until the fault), since this kernel may
  lack ``sch_netem``; ``slow_rate`` adds a ``tbf`` bandwidth cap on ``w1``'s link.

With ``kill9=True`` any scenario also SIGKILLs ``w2`` at the fault (and restarts it).
``dormant doctor`` (:mod:`~dormant.bench.hosts_doctor`) runs against the database before
the fault, every quarter second during the fault of ``partition``, ``kill9`` and ``slow``,
and once all is drained.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ..records import NewInput
from .chaos_worker import URL_ENV
from .hosts_check import Verdict, check
from .hosts_doctor import DoctorWatch
from .hosts_pg import PORT, PgHost
from .netns import Net

SCENARIOS = ("partition", "restart-fast", "restart-immediate", "failover", "kill9", "slow")
#: where the slow link's proxy listens on its worker's host (its loopback only)
PROXY_PORT = 15432
WORKERS = ("w1", "w2", "w3")


@dataclass
class HostsConfig:
    """One scenario run."""

    scenario: str
    threads: int = 30
    #: seconds of load before the fault, and after it
    before_s: float = 3.0
    after_s: float = 6.0
    #: seconds between two turns of a thread
    every_s: float = 1.0
    lease_s: float = 3.0
    partition_s: float = 8.0
    sync: bool = True
    kill9: bool = False
    #: the slow link: how long, its one-way delay ± jitter, its loss, an optional tbf rate
    slow_s: float = 60.0
    delay_s: float = 0.2
    jitter_s: float = 0.05
    loss: float = 0.10
    slow_rate: str | None = None
    out: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="dormant-hosts-")))
    drain_s: float = 60.0


def _url(hosts: list[str], schema: str, port: int = PORT) -> str:
    netloc = ",".join(f"{h}:{port}" for h in hosts)
    query = f"connect_timeout=3&target_session_attrs=read-write&options=-csearch_path%3D{schema}"
    return f"postgresql://postgres@{netloc}/postgres?{query}"


class Workers:
    """The three worker processes, each inside its host's namespace."""

    def __init__(self, net: Net, cfg: HostsConfig, url: str, urls: dict[str, str] | None = None) -> None:
        self.net, self.cfg, self.url = net, cfg, url
        self.urls = urls or {}  # a worker's own URL (through its link's proxy)
        self.procs: dict[str, subprocess.Popen[str]] = {}

    def start(self, name: str) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("DORMANT_")}
        env[URL_ENV] = self.urls.get(name, self.url)
        payload = {
            "ledger": str(self.cfg.out / f"ledger-{name}.log"),
            "name": name,
            "lease_s": self.cfg.lease_s,
        }
        with open(self.cfg.out / f"worker-{name}.log", "a") as log:
            proc = subprocess.Popen(
                [
                    *self.net.exec_args(name),
                    sys.executable,
                    "-m",
                    "dormant.bench.hosts_worker",
                    json.dumps(payload),
                ],
                stdout=subprocess.PIPE,
                stderr=log,
                env=env,
                text=True,
            )
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if line.strip() != "READY":
            raise RuntimeError(f"worker {name} did not start: see {self.cfg.out}/worker-{name}.log")
        self.procs[name] = proc

    def kill9(self, name: str) -> None:
        self.procs[name].send_signal(signal.SIGKILL)
        self.procs[name].wait(10)

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)


class SlowLink:
    """The :mod:`~dormant.bench.netem` proxy on host ``name``: ``127.0.0.1:PROXY_PORT`` there
    forwards to ``upstream``, clean until :meth:`impair`."""

    def __init__(self, net: Net, cfg: HostsConfig, name: str, upstream: str) -> None:
        self.net, self.cfg, self.name = net, cfg, name
        self.stats_path = cfg.out / f"netem-{name}.json"
        payload = {
            "listen": f"127.0.0.1:{PROXY_PORT}",
            "upstream": f"{upstream}:{PORT}",
            "delay_s": cfg.delay_s,
            "jitter_s": cfg.jitter_s,
            "loss": cfg.loss,
            "stats": str(self.stats_path),
        }
        with open(cfg.out / f"netem-{name}.log", "a") as log:
            self.proc = subprocess.Popen(
                [*net.exec_args(name), sys.executable, "-m", "dormant.bench.netem", json.dumps(payload)],
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
            )
        assert self.proc.stdout is not None
        if self.proc.stdout.readline().strip() != "READY":
            self.proc.kill()
            raise RuntimeError(f"the link proxy did not start: see {cfg.out}/netem-{name}.log")

    def impair(self, on: bool = True) -> None:
        """Make the link slow and lossy (``on``), or clean again."""
        self.proc.send_signal(signal.SIGUSR1 if on else signal.SIGUSR2)
        if self.cfg.slow_rate:
            if on:
                self.net.limit(self.name, self.cfg.slow_rate)
            else:
                self.net.unlimit(self.name)

    def stop(self) -> dict[str, object]:
        """Stop the proxy; its counters."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        try:
            return dict(json.loads(self.stats_path.read_text()))
        except (OSError, ValueError):
            return {}


async def _admit_loop(url: str, cfg: HostsConfig, acked: set[tuple[str, str]], stop: asyncio.Event) -> int:
    """Admit turn K to every thread every ``every_s`` until ``stop``; the turns admitted."""
    from ..store.postgres import PostgresStore

    store = PostgresStore(url, pool_size=2)
    await store.open()
    turn = 0
    try:
        while not stop.is_set():
            items = [
                NewInput(
                    thread_id=f"h{i:03d}",
                    kind="user",
                    dedup_key=f"turn{turn}",
                    content=f"h{i:03d} turn {turn}",
                    agent="hosts",
                )
                for i in range(cfg.threads)
            ]
            admitted = []
            while not stop.is_set():  # one that raised may or may not have landed: same keys again
                try:
                    admitted = await asyncio.wait_for(store.admit(items), 10)
                    break
                except Exception:
                    await asyncio.sleep(0.2)
            acked.update((a.thread_id, a.dedup_key) for a in admitted)
            turn += 1
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), cfg.every_s)
    finally:
        await store.close()
    return turn


def _await_line(path: Path, prefix: str, timeout: float = 15.0) -> None:
    """Wait until a new line starting with ``prefix`` is appended to ``path`` (so a fault lands
    in the middle of a slice, or of a tool call)."""
    start = path.stat().st_size if path.exists() else 0
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with open(path, "rb") as f:
            f.seek(start)
            if any(line.startswith(prefix.encode()) for line in f.read().splitlines()):
                return
        time.sleep(0.005)


def _fault(
    cfg: HostsConfig,
    net: Net,
    workers: Workers,
    primary: PgHost,
    standby: PgHost | None,
    link: SlowLink | None,
    doctor: DoctorWatch,
) -> tuple[float, float]:
    """Make the scenario's fault (blocking): when it struck, and when it was over."""
    if cfg.kill9:
        _await_line(cfg.out / "ledger-w2.log", "run charge")
        workers.kill9("w2")
    fault_at = time.time()
    if cfg.scenario == "partition":
        _await_line(cfg.out / "ledger-w1.log", "slice ")
        fault_at = time.time()
        net.cut("w1")
        doctor.watch(cfg.partition_s)
        net.heal("w1")
    elif cfg.scenario == "slow":
        assert link is not None
        _await_line(cfg.out / "ledger-w1.log", "slice ")
        fault_at = time.time()
        link.impair()
        doctor.watch(cfg.slow_s)
        link.impair(False)
    elif cfg.scenario.startswith("restart-"):
        primary.restart(cfg.scenario.removeprefix("restart-"))
    elif cfg.scenario == "failover":
        assert standby is not None
        primary.stop("immediate")
        standby.promote()
    elif cfg.scenario == "kill9":
        _await_line(cfg.out / "ledger-w1.log", "run charge")
        fault_at = time.time()
        workers.kill9("w1")
        doctor.watch(cfg.lease_s)
        workers.start("w1")
    if cfg.kill9:
        workers.start("w2")
    return fault_at, time.time()


async def run_scenario(cfg: HostsConfig, echo: Callable[[str], None] = print) -> Verdict:
    """Run one scenario end to end and check it (see the module doc)."""
    if cfg.scenario not in SCENARIOS:
        raise ValueError(f"unknown scenario {cfg.scenario!r}: one of {', '.join(SCENARIOS)}")
    cfg.out.mkdir(parents=True, exist_ok=True)
    net = Net(["db", "db2", *WORKERS]).open()
    data = Path(tempfile.mkdtemp(prefix="dormant-hosts-pg-"))
    data.chmod(0o755)  # the server runs as its own user
    primary, standby = PgHost(net, "db", data / "a" / "pgdata"), None
    workers: Workers | None = None
    link: SlowLink | None = None
    try:
        primary.init()
        primary.configure(
            "synchronous_standby_names = 'b'\n" if cfg.scenario == "failover" and cfg.sync else ""
        )
        primary.start()
        hosts = [primary.addr]
        if cfg.scenario == "failover":
            standby = PgHost(net, "db2", data / "b" / "pgdata")
            standby.base_backup(primary, "b")
            standby.start()
            hosts.append(standby.addr)
        schema = "dormant_hosts"
        import psycopg

        with psycopg.connect(primary.dsn(), autocommit=True) as conn:
            conn.execute(f'CREATE SCHEMA "{schema}"')
        url = _url(hosts, schema)
        from ..store.postgres import PostgresStore

        store = PostgresStore(url, pool_size=1)  # migrate once, before the workers race to
        await store.open()
        await store.close()
        urls = {}
        if cfg.scenario == "slow":
            link = SlowLink(net, cfg, "w1", primary.addr)
            urls["w1"] = _url(["127.0.0.1"], schema, PROXY_PORT)
        workers = Workers(net, cfg, url, urls)
        for name in WORKERS:
            workers.start(name)
        echo(f"{cfg.scenario}: {cfg.threads} threads, lease {cfg.lease_s} s, out {cfg.out}")
        acked: set[tuple[str, str]] = set()
        stop = asyncio.Event()
        admitting = asyncio.create_task(_admit_loop(url, cfg, acked, stop))
        await asyncio.sleep(cfg.before_s)
        doctor = DoctorWatch(url, cfg.out / "doctor.jsonl")
        await asyncio.to_thread(doctor.sample, "before")
        fault_at, healed_at = await asyncio.to_thread(
            _fault, cfg, net, workers, primary, standby, link, doctor
        )
        echo(f"fault made at {fault_at:.3f}, over at {healed_at:.3f}")
        await asyncio.sleep(cfg.after_s)
        stop.set()
        turns = await admitting
        verdict = await check(url, cfg, acked, fault_at, healed_at, turns)
        await asyncio.to_thread(doctor.sample, "after", quick=False)
        workers.stop()
        verdict.finish(cfg.out, faulted={"w1", "w2"} if cfg.kill9 else {"w1"})
        verdict.doctor = doctor.summary(fault_at)
        if link is not None:
            verdict.link = link.stop()
        return verdict
    finally:
        if link is not None:
            link.stop()
        if workers is not None:
            workers.stop()
        for server in (primary, standby):
            if server is not None:
                server.destroy()
        net.close()
        if not os.environ.get("DORMANT_HOSTS_KEEP"):
            shutil.rmtree(data, ignore_errors=True)
