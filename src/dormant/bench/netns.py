"""Network namespaces joined by a bridge: the "hosts" of ``dormant bench hosts``.

:class:`Net` makes one namespace per host (``<prefix>-<name>``), a veth pair per host
whose outer end is plugged into a bridge in the harness's own namespace, and an address
per host on a private /24 that exists only on these links (the bridge holds ``.254``, so
the harness reaches every host). Everything is torn down by :meth:`Net.close`, which also
runs at interpreter exit and after a failed set-up: a crashed harness leaves no links.

Faults on a link:

* :meth:`Net.cut` / :meth:`Net.heal`: the host's outer veth end down/up. Packets are
  dropped, not refused: TCP connections stall (as across a real partition) and resume
  on heal if their peer still has them.
* :meth:`Net.limit` / :meth:`Net.unlimit`: a ``tbf`` bandwidth cap on the host's side of
  its link (egress of its ``eth0``).
* ``tc netem`` (delay, loss) needs the ``sch_netem`` kernel module, which some kernels lack
  (:func:`netem_available` probes it); the slow/lossy link is emulated in userspace
  instead, by :mod:`dormant.bench.netem` (a delaying proxy on the host).

Needs ``CAP_NET_ADMIN`` (root); :func:`available` says why not, when not.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import re
import shutil
import signal
import subprocess
from dataclasses import dataclass, field

#: the private /24 of the links (no route leaves it)
SUBNET = "10.231.7"
BRIDGE_ADDR = f"{SUBNET}.254"


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check, timeout=10)


def available() -> str | None:
    """None when namespaces, veth pairs and bridges can be made here; else why not."""
    if shutil.which("ip") is None:
        return "the `ip` command (iproute2) is not installed"
    if os.geteuid() != 0:
        return "network namespaces need root (CAP_NET_ADMIN)"
    probe = f"dnprobe{os.getpid()}"
    made = _ip("netns", "add", probe, check=False)
    if made.returncode != 0:
        return f"`ip netns add` failed: {made.stderr.strip()}"
    _ip("netns", "del", probe, check=False)
    return None


def netem_available() -> bool:
    """Whether ``tc qdisc ... netem`` works in this kernel (probed on a throwaway namespace)."""
    if shutil.which("tc") is None or available() is not None:
        return False
    probe = f"dnnetem{os.getpid()}"
    _ip("netns", "add", probe, check=False)
    try:
        done = subprocess.run(
            [
                "ip",
                "netns",
                "exec",
                probe,
                "tc",
                "qdisc",
                "add",
                "dev",
                "lo",
                "root",
                "netem",
                "delay",
                "1ms",
            ],
            capture_output=True,
            check=False,
            timeout=10,
        )
        return done.returncode == 0
    finally:
        _ip("netns", "del", probe, check=False)


def sweep() -> list[str]:
    """Delete what a harness that died without its teardown (SIGKILL) left: the namespaces
    and bridges named after a process that no longer runs, and every process still inside
    those namespaces (its servers and workers). The namespaces deleted."""
    swept: list[str] = []
    listed = _ip("netns", "list", check=False).stdout.split()
    for ns in listed:
        found = re.fullmatch(r"dh(\d+)-\w+", ns)
        if found is None or _alive(int(found.group(1))):
            continue
        for pid in _ip("netns", "pids", ns, check=False).stdout.split():
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(pid), signal.SIGKILL)
        _ip("netns", "del", ns, check=False)
        _ip("link", "del", f"dh{found.group(1)}br", check=False)
        swept.append(ns)
    return swept


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@dataclass
class Net:
    """Hosts ``names`` (namespaces) on one bridge; ``addr[name]`` is each one's address."""

    names: list[str]
    prefix: str = field(default_factory=lambda: f"dh{os.getpid()}")
    addr: dict[str, str] = field(default_factory=dict)
    _made: list[str] = field(default_factory=list)
    _bridge: str = ""

    def ns(self, name: str) -> str:
        """The namespace of host ``name``."""
        return f"{self.prefix}-{name}"

    def outer(self, name: str) -> str:
        """The veth end of host ``name`` on the bridge (15 characters at most)."""
        return f"{self.prefix}{self.names.index(name)}o"[:15]

    def open(self) -> Net:
        """Make the namespaces, links and addresses (torn down if any step fails)."""
        atexit.register(self.close)
        sweep()
        try:
            self._bridge = f"{self.prefix}br"[:15]
            _ip("link", "add", self._bridge, "type", "bridge")
            self._made.append(f"link:{self._bridge}")
            _ip("addr", "add", f"{BRIDGE_ADDR}/24", "dev", self._bridge)
            _ip("link", "set", self._bridge, "up")
            for n, name in enumerate(self.names):
                ns, outer, inner = self.ns(name), self.outer(name), f"{self.prefix}{n}i"[:15]
                _ip("netns", "add", ns)
                self._made.append(f"ns:{ns}")
                _ip("link", "add", outer, "type", "veth", "peer", "name", inner)
                self._made.append(f"link:{outer}")
                _ip("link", "set", inner, "netns", ns)
                _ip("link", "set", outer, "master", self._bridge)
                _ip("link", "set", outer, "up")
                self.addr[name] = f"{SUBNET}.{n + 1}"
                for args in (
                    ("addr", "add", f"{self.addr[name]}/24", "dev", inner),
                    ("link", "set", inner, "name", "eth0"),
                    ("link", "set", "eth0", "up"),
                    ("link", "set", "lo", "up"),
                ):
                    _ip("-n", ns, *args)
        except BaseException:
            self.close()
            raise
        return self

    def exec_args(self, name: str) -> list[str]:
        """The argv prefix that runs a command inside host ``name``."""
        return ["ip", "netns", "exec", self.ns(name)]

    def cut(self, name: str) -> None:
        """Partition host ``name``: its link drops every packet until :meth:`heal`."""
        _ip("link", "set", self.outer(name), "down")

    def heal(self, name: str) -> None:
        """Undo :meth:`cut`."""
        _ip("link", "set", self.outer(name), "up")

    def limit(self, name: str, rate: str, burst: str = "32kb", latency: str = "400ms") -> None:
        """Cap what host ``name`` sends at ``rate`` (``tc`` units: ``1mbit``) with ``tbf``."""
        subprocess.run(
            [*self.exec_args(name), "tc", "qdisc", "replace", "dev", "eth0", "root", "tbf",
             "rate", rate, "burst", burst, "latency", latency],
            capture_output=True, text=True, check=True, timeout=10,
        )  # fmt: skip

    def unlimit(self, name: str) -> None:
        """Undo :meth:`limit` (errors ignored: there may be none)."""
        subprocess.run(
            [*self.exec_args(name), "tc", "qdisc", "del", "dev", "eth0", "root"],
            capture_output=True,
            check=False,
            timeout=10,
        )

    def close(self) -> None:
        """Delete every link and namespace made (idempotent; errors ignored)."""
        while self._made:
            kind, _, what = self._made.pop().partition(":")
            with contextlib.suppress(Exception):
                if kind == "ns":
                    _ip("netns", "del", what, check=False)
                else:
                    _ip("link", "del", what, check=False)

    def __enter__(self) -> Net:
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()
