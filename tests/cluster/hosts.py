"""Test hosts on this machine: Linux network namespaces joined by one bridge.

Layout (``Hosts(["a", "b"])``, prefix ``rmqc<pid>x<n>-``, unique per set)::

    namespace <prefix>sw        the switch: bridge br0, one port per host (p1, p2, ...)
    namespace <prefix>a         eth0 10.231.0.1/24 (veth, its peer p1 on br0), lo up
    namespace <prefix>b         eth0 10.231.0.2/24 (peer p2), lo up

Every host sees only the other hosts (and its own loopback): no route leaves the set, so all
traffic stays on 10.231.0.0/24 and 127.0.0.1. The root namespace is not touched (no link,
address or route is added to it), so sets of different tests or engineers never meet even
with the same addresses.

Faults: :meth:`Hosts.cut` sets a host's switch port down (its packets are dropped silently:
TCP sees no reset, only silence, as with a pulled cable), :meth:`Hosts.heal` sets it up again.
:meth:`Hosts.popen` runs a command inside a host (``ip netns exec``: the child is the
command itself, so ``kill -9`` of its pid kills the command). :meth:`Hosts.thread_in` runs a
function on a new thread that entered a host's namespace (``setns`` is per thread: sockets
that thread makes live in that host), which the fault proxy uses.

:meth:`Hosts.close` kills the processes started here and deletes the namespaces (deleting a
namespace deletes its veth ends and their peers), also after a failed test; sets left by a
killed test run (their pid gone) are deleted by the next :class:`Hosts`.
"""

from __future__ import annotations

import contextlib
import ctypes
import itertools
import os
import shutil
import subprocess
import threading
from collections.abc import Callable, Sequence
from typing import Any

#: the hosts' /24 (host i, counted from 1, is .i)
SUBNET = "10.231.0"
_PREFIX = "rmqc"
_CLONE_NEWNET = 0x40000000
_count = itertools.count(1)


def netns_unavailable() -> str | None:
    """Why namespaces cannot be made here (``None`` when they can): not root, or no ``ip``."""
    if os.geteuid() != 0:
        return "ip netns needs root (CI runs as root)"
    if shutil.which("ip") is None:
        return "iproute2's ip command is not installed"
    return None


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    r = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if check and r.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: exit {r.returncode}: {r.stderr.strip()}")
    return r


def remove_stale_sets() -> list[str]:
    """Delete namespaces of sets whose creating process is gone (a killed test run); returns
    their names. Sets of live processes (other tests running now) are left alone."""
    removed = []
    for line in _ip("netns", "list", check=False).stdout.splitlines():
        name = line.split()[0] if line.split() else ""
        if not name.startswith(_PREFIX):
            continue
        pid = name[len(_PREFIX) :].split("x", 1)[0]
        if pid.isdigit() and not os.path.exists(f"/proc/{pid}"):
            _ip("netns", "del", name, check=False)
            removed.append(name)
    return removed


class Hosts:
    """A set of test hosts (module docstring). ``names``: short host names (letters and
    digits), addressed ``10.231.0.1``, ``.2``... in order. Use as a context manager."""

    def __init__(self, names: Sequence[str]) -> None:
        reason = netns_unavailable()
        if reason is not None:
            raise RuntimeError(reason)
        if len(set(names)) != len(names) or not all(n.isalnum() for n in names) or not 0 < len(names) < 250:
            raise ValueError(f"host names must be distinct letters and digits (1..249 of them): {names!r}")
        remove_stale_sets()
        self.prefix = f"{_PREFIX}{os.getpid()}x{next(_count)}-"
        self.names = list(names)
        self.switch = self.prefix + "sw"
        self._procs: list[subprocess.Popen[Any]] = []
        self._made: list[str] = []
        try:
            self._build()
        except BaseException:
            self.close()
            raise

    # ---- building --------------------------------------------------------------------

    def _build(self) -> None:
        _ip("netns", "add", self.switch)
        self._made.append(self.switch)
        _ip("-n", self.switch, "link", "add", "br0", "type", "bridge")
        _ip("-n", self.switch, "link", "set", "br0", "up")
        for i, name in enumerate(self.names, 1):
            ns = self.ns(name)
            _ip("netns", "add", ns)
            self._made.append(ns)
            _ip("-n", self.switch, "link", "add", f"p{i}", "type", "veth", "peer", "name", "eth0", "netns", ns)
            _ip("-n", self.switch, "link", "set", f"p{i}", "master", "br0")
            _ip("-n", self.switch, "link", "set", f"p{i}", "up")
            _ip("-n", ns, "addr", "add", f"{self.addr(name)}/24", "dev", "eth0")
            _ip("-n", ns, "link", "set", "eth0", "up")
            _ip("-n", ns, "link", "set", "lo", "up")

    # ---- names -----------------------------------------------------------------------

    def ns(self, name: str) -> str:
        """The namespace of host ``name``."""
        if name not in self.names:
            raise KeyError(f"no host {name!r} in {self.names}")
        return self.prefix + name

    def addr(self, name: str) -> str:
        """Host ``name``'s address on the hosts' network."""
        self.ns(name)  # (KeyError for an unknown host)
        return f"{SUBNET}.{self.names.index(name) + 1}"

    def _port(self, name: str) -> str:
        return f"p{self.names.index(name) + 1}"

    # ---- processes -------------------------------------------------------------------

    def popen(self, name: str, args: Sequence[str], **kw: Any) -> subprocess.Popen[Any]:
        """``args`` started inside host ``name`` (killed by :meth:`close` if still running)."""
        proc = subprocess.Popen(["ip", "netns", "exec", self.ns(name), *args], **kw)
        self._procs.append(proc)
        return proc

    def run(
        self, name: str, args: Sequence[str], timeout: float = 60, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        """``args`` run inside host ``name`` to the end; its output as text."""
        return subprocess.run(
            ["ip", "netns", "exec", self.ns(name), *args], capture_output=True, text=True, timeout=timeout, env=env
        )

    def thread_in(self, name: str, fn: Callable[[], None], thread_name: str = "") -> threading.Thread:
        """A started daemon thread that enters host ``name``'s network namespace, then runs
        ``fn``: sockets it makes belong to that host. An entry failure is raised by the
        thread's first step and reported through ``fn`` never running (see :class:`FaultProxy`)."""
        path = f"/var/run/netns/{self.ns(name)}"

        def body() -> None:
            libc = ctypes.CDLL(None, use_errno=True)
            fd = os.open(path, os.O_RDONLY)
            try:
                if libc.setns(fd, _CLONE_NEWNET) != 0:
                    err = ctypes.get_errno()
                    raise OSError(err, f"setns({path}): {os.strerror(err)}")
            finally:
                os.close(fd)
            fn()

        t = threading.Thread(target=body, name=thread_name or f"in-{name}", daemon=True)
        t.start()
        return t

    # ---- faults ----------------------------------------------------------------------

    def cut(self, name: str) -> None:
        """Host ``name``'s link down: its packets vanish (no reset), both ways."""
        _ip("-n", self.switch, "link", "set", self._port(name), "down")

    def heal(self, name: str) -> None:
        """Host ``name``'s link up again."""
        _ip("-n", self.switch, "link", "set", self._port(name), "up")

    # ---- teardown --------------------------------------------------------------------

    def kill_processes(self) -> None:
        """Kill the processes :meth:`popen` started so far (SIGKILL, reaped); the hosts stay."""
        for proc in self._procs:
            if proc.poll() is None:
                proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=30)
        self._procs.clear()

    def close(self) -> None:
        """Kill the processes started here (SIGKILL, reaped) and delete the namespaces."""
        self.kill_processes()
        for ns in reversed(self._made):
            _ip("netns", "del", ns, check=False)
        self._made.clear()

    def __enter__(self) -> Hosts:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def existing(self) -> list[str]:
        """The namespaces of this set that exist now (for the teardown test)."""
        listed = {line.split()[0] for line in _ip("netns", "list", check=False).stdout.splitlines() if line.split()}
        return sorted(n for n in [self.switch, *(self.prefix + h for h in self.names)] if n in listed)
