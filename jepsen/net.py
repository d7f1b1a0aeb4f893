"""The test network: one network namespace per host on a bridge the harness creates.

Every host (node, worker, client) gets a namespace `gj-<name>`, a veth pair whose outer end
is enslaved to the bridge `gj-br`, and an address in 10.77.0.0/24. The bridge itself holds
10.77.0.1 in the root namespace: that is where the witness listens. These addresses exist
only on the bridge and inside the namespaces, so no test traffic leaves the machine.

Faults are iptables rules in a chain `GJ` that each namespace jumps to from INPUT and OUTPUT:
a DROP of packets from and to a peer cuts TCP in both directions (the handshake needs both).
`heal()` flushes the chains. Requires root.
"""

from __future__ import annotations

import fcntl
import logging
import os
import shutil
import signal
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from gnomon.jepsen.disk import cleanup_mounts

log = logging.getLogger(__name__)

PREFIX = "gj-"
BRIDGE = "gj-br"
SUBNET = "10.77.0"
BRIDGE_IP = f"{SUBNET}.1"
CHAIN = "GJ"
LOCK_PATH = Path("/run/gnomon-jepsen.lock")


class NetError(RuntimeError):
    """A network set-up or fault command failed; the message has the command and its output."""


def run(args: list[str], *, check: bool = True, timeout: float = 20.0) -> str:
    proc = subprocess.run(args, capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise NetError(f"{' '.join(args)}: exit {proc.returncode}: {proc.stderr.strip()}")
    return proc.stdout


def require_root() -> None:
    if os.geteuid() != 0:
        raise NetError(
            "gnomon jepsen needs root: it creates network namespaces, a bridge and iptables "
            "rules (run it with sudo, or as root in a disposable VM or container)"
        )


def missing_tools(need_faketime: bool = False) -> list[str]:
    """Debian packages the harness needs that are not installed."""
    missing = [pkg for tool, pkg in (("ip", "iproute2"), ("iptables", "iptables"))
               if shutil.which(tool) is None]
    if need_faketime and libfaketime() is None:
        missing.append("libfaketime")
    return missing


def libfaketime() -> str | None:
    for base in ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64",
                 "/usr/lib", "/usr/local/lib"):
        path = Path(base) / "faketime" / "libfaketimeMT.so.1"
        if path.exists():
            return str(path)
    return None


@dataclass(frozen=True, slots=True)
class Host:
    name: str
    ip: str

    @property
    def ns(self) -> str:
        return PREFIX + self.name

    @property
    def veth(self) -> str:
        return f"{PREFIX}{self.name}-v"


class RunLock:
    """One harness run at a time on a machine (they would share addresses and names)."""

    def __init__(self, path: Path = LOCK_PATH):
        self.path = path
        self._fh = None

    def __enter__(self) -> RunLock:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fh = open(self.path, "a+")  # noqa: SIM115
        try:
            fcntl.flock(self._fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._fh.seek(0)
            owner = self._fh.read().strip() or "?"
            self._fh.close()
            raise NetError(f"another gnomon jepsen run holds {self.path} (pid {owner})") from None
        self._fh.seek(0)
        self._fh.truncate()
        self._fh.write(str(os.getpid()))
        self._fh.flush()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._fh:
            fcntl.flock(self._fh, fcntl.LOCK_UN)
            self._fh.close()


class Net:
    def __init__(self, hosts: Iterable[Host]):
        self.hosts = {h.name: h for h in hosts}

    def host(self, name: str) -> Host:
        return self.hosts[name]

    @staticmethod
    def exec_prefix(name: str) -> list[str]:
        return ["ip", "netns", "exec", PREFIX + name]

    # -- lifecycle ---------------------------------------------------------------------------

    def setup(self) -> None:
        cleanup_leftovers()
        run(["ip", "link", "add", BRIDGE, "type", "bridge"])
        run(["ip", "addr", "add", f"{BRIDGE_IP}/24", "dev", BRIDGE])
        run(["ip", "link", "set", BRIDGE, "up"])
        for h in self.hosts.values():
            run(["ip", "netns", "add", h.ns])
            run(["ip", "link", "add", h.veth, "type", "veth", "peer", "name", "eth0",
                 "netns", h.ns])
            run(["ip", "link", "set", h.veth, "master", BRIDGE, "up"])
            ns = ["ip", "-n", h.ns]
            run([*ns, "addr", "add", f"{h.ip}/24", "dev", "eth0"])
            run([*ns, "link", "set", "eth0", "up"])
            run([*ns, "link", "set", "lo", "up"])
            ipt = [*self.exec_prefix(h.name), "iptables", "-w"]
            run([*ipt, "-N", CHAIN])
            run([*ipt, "-A", "INPUT", "-j", CHAIN])
            run([*ipt, "-A", "OUTPUT", "-j", CHAIN])

    def teardown(self) -> None:
        cleanup_leftovers()

    # -- faults ------------------------------------------------------------------------------

    def drop(self, name: str, peers: Iterable[str]) -> None:
        """In `name`'s namespace, drop every packet from and to the peers' addresses."""
        ipt = [*self.exec_prefix(name), "iptables", "-w"]
        for peer in peers:
            ip = self.hosts[peer].ip
            run([*ipt, "-A", CHAIN, "-s", ip, "-j", "DROP"])
            run([*ipt, "-A", CHAIN, "-d", ip, "-j", "DROP"])

    def grudge(self, grudge: dict[str, Iterable[str]]) -> None:
        """Each host drops traffic with the hosts it holds a grudge against (both sides are
        listed by the callers, so every cut is symmetric)."""
        for name, peers in grudge.items():
            self.drop(name, peers)

    def heal(self, names: Iterable[str] | None = None) -> None:
        for name in names or self.hosts:
            run([*self.exec_prefix(name), "iptables", "-w", "-F", CHAIN])

    def rules(self, name: str) -> str:
        return run([*self.exec_prefix(name), "iptables", "-w", "-S", CHAIN])


def partition_grudge(groups: list[list[str]]) -> dict[str, set[str]]:
    """Hosts in different groups cannot talk; hosts in no group keep every link."""
    grudge: dict[str, set[str]] = {}
    for i, group in enumerate(groups):
        others = {h for j, g in enumerate(groups) if j != i for h in g}
        for h in group:
            grudge.setdefault(h, set()).update(others)
    return grudge


def cleanup_leftovers() -> list[str]:
    """Remove what an earlier (possibly crashed) run left: processes in our namespaces, the
    namespaces, our links, stale libfaketime shared-memory files, our tmpfs mounts. Returns
    what was removed."""
    removed = []
    for ns in _our_namespaces():
        pids = run(["ip", "netns", "pids", ns], check=False).split()
        for pid in pids:
            _kill(int(pid))
        run(["ip", "netns", "del", ns], check=False)
        removed.append(ns)
    for link in _our_links():
        run(["ip", "link", "del", link], check=False)
        removed.append(link)
    removed += clean_faketime_shm()
    removed += cleanup_mounts()
    if removed:
        log.info("cleaned leftovers: %s", ", ".join(removed))
    return removed


def clean_faketime_shm() -> list[str]:
    """libfaketime leaves /dev/shm/faketime_* files behind; drop those of dead processes."""
    removed = []
    shm = Path("/dev/shm")
    # Named `sem.faketime_sem_<pid>` (and `faketime_shm_<pid>`) by libfaketime 0.9.10.
    for path in shm.glob("*faketime_*") if shm.exists() else ():
        pid = "".join(ch for ch in path.name.split("_")[-1] if ch.isdigit())
        if pid and Path(f"/proc/{pid}").exists():
            continue
        try:
            path.unlink()
            removed.append(str(path))
        except OSError:
            pass
    return removed


def _kill(pid: int) -> None:
    for sig in (signal.SIGCONT, signal.SIGKILL):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return


def _our_namespaces() -> list[str]:
    out = run(["ip", "netns", "list"], check=False)
    return [line.split()[0] for line in out.splitlines()
            if line.strip() and line.split()[0].startswith(PREFIX)]


def _our_links() -> list[str]:
    out = run(["ip", "-o", "link", "show"], check=False)
    links = []
    for line in out.splitlines():
        parts = line.split(":", 2)
        if len(parts) > 1:
            name = parts[1].strip().split("@")[0]
            if name.startswith(PREFIX):
                links.append(name)
    # The bridge last: veths first so nothing is enslaved when it goes.
    return sorted(links, key=lambda n: n == BRIDGE)
