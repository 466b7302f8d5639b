"""Two hosts made of network namespaces: each with its own address, host name and /etc/hosts.

`hosta` (10.99.0.1) and `hostb` (10.99.0.2) are joined by a veth pair whose ends are both called eth0,
so Horovod finds the same interface name on every host, as on a real cluster. Each process runs under
`ip netns exec` (which bind-mounts /etc/netns/NAME/hosts over /etc/hosts) and `unshare --uts` (its own
host name). Nothing leaves the namespaces. One pair serves the whole module; the finalizer deletes the
namespaces, the veth and the /etc/netns files even when a test fails.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
KSCALE = [sys.executable, "-m", "kscale.cli"]


@dataclasses.dataclass(frozen=True)
class Result:
    host: str
    returncode: int | None  # None: killed at the timeout
    output: str
    elapsed: float


@dataclasses.dataclass(frozen=True)
class NetnsHost:
    netns: str
    hostname: str
    address: str

    @property
    def hosts_file(self) -> Path:
        return Path("/etc/netns") / self.netns / "hosts"

    def command(self, argv: Sequence[str]) -> list[str]:
        """argv run inside this host: its namespace, its /etc/hosts, its own host name."""
        set_name = 'hostname "$0" && exec "$@"'
        return [
            "ip",
            "netns",
            "exec",
            self.netns,
            "unshare",
            "--uts",
            "sh",
            "-c",
            set_name,
            self.hostname,
            *argv,
        ]


class TwoHosts:
    def __init__(self, a: NetnsHost, b: NetnsHost, logs: Path) -> None:
        self.hosts = (a, b)
        self.logs = logs

    def write_hosts(self, loopback: bool) -> None:
        """loopback=True: each host's name resolves to 127.0.0.1 on itself (the Gloo failure)."""
        for me in self.hosts:
            lines = ["127.0.0.1 localhost" + (f" {me.hostname}" if loopback else "")]
            lines += [f"{h.address} {h.hostname}" for h in self.hosts if not (loopback and h is me)]
            me.hosts_file.write_text("\n".join(lines) + "\n")

    def kscale_on_both(self, argvs: Sequence[Sequence[str]], timeout: float) -> list[Result]:
        """Start `kscale <argv>` on hosta and hostb at once; wait for both (kill both at `timeout`)."""
        return self.kscale_on(list(zip(self.hosts, argvs)), timeout)

    def kscale_on(
        self, runs: Sequence[tuple[NetnsHost, Sequence[str]]], timeout: float, **extra_env: str
    ) -> list[Result]:
        """Start `kscale <argv>` for each (host, argv) at once, with the caller's launcher and ssh variables
        removed and `extra_env` added; wait for all (kill all at `timeout`)."""
        prefixes = ("HOROVOD_", "OMPI_", "PMI_", "SLURM_", "SSH_")  # SSH_*: a worker's come from its sshd
        env = {k: v for k, v in os.environ.items() if not k.startswith(prefixes)}
        env.pop("TF_CONFIG", None)
        env.update(PYTHONUNBUFFERED="1", TF_CPP_MIN_LOG_LEVEL="3", **extra_env)
        procs = []
        start = time.monotonic()
        for host, argv in runs:
            log = (self.logs / f"{host.hostname}-{secrets.token_hex(3)}.log").open("w")
            proc = subprocess.Popen(
                host.command([*KSCALE, *argv]),
                cwd=REPO,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            procs.append((host, proc, log))
        results = []
        for host, proc, log in procs:
            try:
                code: int | None = proc.wait(timeout=max(1.0, timeout - (time.monotonic() - start)))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)  # its workers follow (PR_SET_PDEATHSIG)
                proc.wait()
                code = None
            elapsed = time.monotonic() - start
            log.close()
            results.append(Result(host.hostname, code, Path(log.name).read_text(), elapsed))
        return results


def _ip(*args: str) -> None:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        raise RuntimeError(f"`ip {' '.join(args)}` failed: {done.stderr.strip()}")


@pytest.fixture(scope="module")
def two_hosts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TwoHosts]:
    tag = f"{os.getpid() % 10000:04d}{secrets.token_hex(1)}"
    a = NetnsHost(f"ks{tag}a", "hosta", "10.99.0.1")
    b = NetnsHost(f"ks{tag}b", "hostb", "10.99.0.2")
    veth_a, veth_b = f"ksv{tag}a", f"ksv{tag}b"
    made_netns_dir = not Path("/etc/netns").exists()
    try:
        missing = [tool for tool in ("ip", "unshare") if shutil.which(tool) is None]
        if missing or os.geteuid() != 0:
            raise RuntimeError(f"need root and iproute2/util-linux (missing: {missing or 'root'})")
        for host in (a, b):
            _ip("netns", "add", host.netns)
        _ip("link", "add", veth_a, "type", "veth", "peer", "name", veth_b)
        for host, veth in ((a, veth_a), (b, veth_b)):
            _ip("link", "set", veth, "netns", host.netns)
            _ip("-n", host.netns, "link", "set", veth, "name", "eth0")
            _ip("-n", host.netns, "addr", "add", f"{host.address}/24", "dev", "eth0")
            _ip("-n", host.netns, "link", "set", "eth0", "up")
            _ip("-n", host.netns, "link", "set", "lo", "up")  # loopback starts down in a new namespace
            host.hosts_file.parent.mkdir(parents=True, exist_ok=True)
    except (RuntimeError, OSError, subprocess.SubprocessError) as err:
        _teardown(a, b, veth_a, made_netns_dir)
        pytest.fail(
            f"cannot build the two network-namespace hosts for the multi-host tests: {err}. These tests need "
            "root on Linux with `ip netns`, veth and `unshare --uts` (they are marked netns)."
        )
    pair = TwoHosts(a, b, tmp_path_factory.mktemp("multihost-logs"))
    pair.write_hosts(loopback=False)
    try:
        yield pair
    finally:
        _teardown(a, b, veth_a, made_netns_dir)


def _teardown(a: NetnsHost, b: NetnsHost, veth_a: str, made_netns_dir: bool) -> None:
    def quietly(*argv: str) -> None:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            subprocess.run(argv, capture_output=True, timeout=30)

    for host in (a, b):
        quietly("ip", "netns", "del", host.netns)  # takes its end of the veth with it
        shutil.rmtree(host.hosts_file.parent, ignore_errors=True)
    quietly("ip", "link", "del", veth_a)  # if it was never moved into a namespace
    if made_netns_dir:
        with contextlib.suppress(OSError):
            Path("/etc/netns").rmdir()
