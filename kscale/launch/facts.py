"""What kscale knows about this machine before a launch: the facts that `doctor` and `run`'s preflight judge.

Gathering (which touches the system: sockets, ssh, a subprocess that imports TensorFlow) is kept apart
from judging (`kscale.launch.checks`, pure functions over a `Facts`), so tests fake any machine by building
a `Facts` by hand.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import glob
import hashlib
import importlib.util
import ipaddress
import json
import os
import resource
import shlex
import socket
import subprocess
import sys
from collections.abc import Mapping, Sequence

from kscale import _optional, checkpoint_io, environment
from kscale.launch.hosts import Host

HOROVOD_INSTALL = _optional.HOROVOD_INSTALL


@dataclasses.dataclass(frozen=True)
class BuildInfo:
    """Versions, and what Horovod was compiled with (its `*_built()` answers)."""

    horovod_version: str | None = None
    tensorflow_version: str | None = None
    keras_version: str | None = None
    #: horovod.tensorflow imports: Horovod was compiled against TensorFlow.
    tensorflow: bool = False
    gloo: bool = False
    mpi: bool = False
    nccl: bool = False
    ddl: bool = False
    ccl: bool = False
    cuda: bool = False
    rocm: bool = False
    #: GPUs TensorFlow sees (None: not asked, or TensorFlow not importable).
    gpus: tuple[str, ...] | None = None
    #: Why `import horovod.tensorflow` failed, if it did.
    error: str | None = None


# Runs in a fresh interpreter: importing TensorFlow costs seconds and memory that the launcher should not
# keep, and a broken build (a missing symbol) must not crash kscale itself. One import answers every
# question, where horovod.common.util's *_built() helpers fork and import TensorFlow once per question.
_PROBE = r"""
import json, sys
from importlib import metadata
def version(*names):
    for name in names:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return None
out = {
    "horovod_version": version("horovod"),
    "tensorflow_version": version("tensorflow", "tensorflow-cpu", "tensorflow-gpu", "tensorflow-macos",
                                  "intel-tensorflow"),
    "keras_version": version("keras"),
}
try:
    import horovod.tensorflow as hvd
    out.update(tensorflow=True, gloo=bool(hvd.gloo_built()), mpi=bool(hvd.mpi_built()),
               nccl=bool(hvd.nccl_built()), ddl=bool(hvd.ddl_built()), ccl=bool(hvd.ccl_built()),
               cuda=bool(hvd.cuda_built()), rocm=bool(hvd.rocm_built()))
except Exception as err:
    out["error"] = f"{type(err).__name__}: {err}".strip()
if sys.argv[1] == "gpus":
    try:
        import tensorflow as tf
        out["gpus"] = [d.name for d in tf.config.list_physical_devices("GPU")]
    except Exception:
        pass
sys.stdout.write("\nKSCALE_PROBE " + json.dumps(out) + "\n")
"""


@functools.cache
def probe_build(gpus: bool = False, timeout: float = 180.0) -> BuildInfo:
    """What Horovod was built with: asked of a fresh interpreter once per installation (importing
    TensorFlow there costs every launch seconds), then read from kscale's cache until Horovod or
    TensorFlow is installed again. GPUs can change without a reinstall: asking for them always probes."""
    key = None if gpus else _installation_key()
    cached = _cached_build(key)
    if cached is not None:
        return cached
    found = _probe(gpus, timeout)
    if key is not None and found.error is None:
        _write_atomically(_cache_path(key), json.dumps(dataclasses.asdict(found)))
    return found


def _installation_key() -> str | None:
    """What the probe's answer depends on: this interpreter, and the files of Horovod's TensorFlow
    extension and of TensorFlow (size and time of each): a rebuild or another version changes it. None
    (no caching) where Horovod or TensorFlow is not installed."""
    parts = [sys.executable]
    for package, pattern in (
        ("horovod", "tensorflow/mpi_lib*"),
        ("tensorflow", "python/_pywrap_tensorflow*"),
    ):
        try:
            spec = importlib.util.find_spec(package)  # finds the package without importing it
        except (ImportError, ValueError):
            return None
        if spec is None or not spec.submodule_search_locations:
            return None
        files = sorted(glob.glob(os.path.join(next(iter(spec.submodule_search_locations)), pattern)))
        if not files:
            return None
        for path in files:
            stat = os.stat(path)
            parts.append(f"{path}:{stat.st_size}:{stat.st_mtime_ns}")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:24]


def _cache_path(key: str) -> str:
    home = environment.current().cache_home or os.path.expanduser("~/.cache")
    return os.path.join(home, "kscale", f"horovod-build-{key}.json")


def _cached_build(key: str | None) -> BuildInfo | None:
    if key is None:
        return None
    try:
        with open(_cache_path(key)) as f:
            return BuildInfo(**json.load(f))
    except (OSError, ValueError, TypeError):  # none yet, or unreadable: probe again
        return None


def _write_atomically(path: str, text: str) -> None:
    """The cache file, written once through checkpoint_io's atomic save (local files without TensorFlow:
    the launcher imports none); a cache that cannot be written costs the next launch a probe, nothing else."""

    def write(staged: str) -> None:
        with open(staged, "w") as f:
            f.write(text)

    with contextlib.suppress(OSError):
        checkpoint_io.atomic_save(path, write, may_be_folder=False)


def _probe(gpus: bool, timeout: float) -> BuildInfo:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    try:
        proc = subprocess.run(
            [sys.executable, "-c", _PROBE, "gpus" if gpus else "-"],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
        )
    except subprocess.TimeoutExpired:
        return BuildInfo(error=f"importing horovod.tensorflow took more than {timeout:.0f} s")
    for line in proc.stdout.splitlines():
        if line.startswith("KSCALE_PROBE "):
            data = json.loads(line.removeprefix("KSCALE_PROBE "))
            if data.get("gpus") is not None:
                data["gpus"] = tuple(data["gpus"])
            return BuildInfo(**data)
    tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
    return BuildInfo(error=f"the probe interpreter exited with {proc.returncode}: {' | '.join(tail)}")


@dataclasses.dataclass(frozen=True)
class Intent:
    """What the user is about to launch: the hosts, the controller and how hosts are reached."""

    hosts: tuple[Host, ...] = ()
    #: Per-node launch: node 0's address and the rendezvous port, and how many nodes take part.
    master: str | None = None
    master_port: int | None = None
    nnodes: int = 1
    #: "gloo", "mpi", or None for Horovod's own default (MPI if built with it, else Gloo).
    controller: str | None = None
    ssh_port: int | None = None
    ssh_identity_file: str | None = None
    nics: tuple[str, ...] = ()
    #: The engine that will run the job (kscale.launch.engines): Gloo's and MPI's needs are Horovod's only.
    engine: str = "horovod"
    #: Worker processes this host will start (-np on one host, --nproc-per-node), if known.
    processes_here: int | None = None


@dataclasses.dataclass(frozen=True)
class Route:
    """How this host reaches another: its resolved address and the local address/interface used."""

    name: str
    address: str | None = None
    source: str | None = None
    interface: str | None = None
    error: str | None = None


@dataclasses.dataclass(frozen=True)
class SSHResult:
    ok: bool
    detail: str = ""
    #: Interface names with an IPv4 address on that host (`ip -o -4 addr`), when ssh worked.
    interfaces: tuple[str, ...] | None = None


@dataclasses.dataclass(frozen=True)
class Facts:
    """Everything the checks look at. Built by `gather()`; built by hand in tests."""

    intent: Intent = Intent()
    hostname: str = "localhost"
    #: IPv4 addresses the host name resolves to (what Gloo falls back to); empty if it does not resolve.
    hostname_addresses: tuple[str, ...] = ()
    #: Interface name -> its IPv4 addresses.
    interfaces: Mapping[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)
    #: RLIMIT_MEMLOCK soft/hard in bytes; None means unlimited.
    memlock_soft: int | None = None
    memlock_hard: int | None = None
    rdma_devices: tuple[str, ...] = ()
    build: BuildInfo | None = None
    #: Hosts from the intent that are not this machine (by address), in order.
    remote_hosts: tuple[str, ...] = ()
    #: Host list entries that are this machine.
    local_hosts: tuple[str, ...] = ()
    routes: Mapping[str, Route] = dataclasses.field(default_factory=dict)
    ssh: Mapping[str, SSHResult] = dataclasses.field(default_factory=dict)
    #: For a per-node launch whose master address is this host: can the rendezvous port be bound?
    master_port_free: bool | None = None
    master_is_local: bool | None = None
    #: What the per-node master address resolves to here.
    master_address: str | None = None
    #: NVIDIA GPUs a worker started here would see (`nvidia_gpus()`); None: not asked.
    nvidia_gpus: tuple[str, ...] | None = None

    @property
    def local_addresses(self) -> set[str]:
        return {addr for addrs in self.interfaces.values() for addr in addrs}

    @property
    def multi_host(self) -> bool:
        """Processes on other machines will connect to this one (a loopback master means one machine)."""
        if self.remote_hosts:
            return True
        return self.intent.nnodes > 1 and not (self.master_address and is_loopback(self.master_address))

    def interface_of(self, address: str) -> str | None:
        for name, addrs in self.interfaces.items():
            if address in addrs:
                return name
        return None


def is_loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


def local_interfaces() -> dict[str, tuple[str, ...]]:
    """Interface name -> IPv4 addresses, the same view Horovod's runner takes (psutil)."""
    try:
        import psutil
    except ImportError:  # psutil comes with horovod; without it, read `ip`
        return _interfaces_from_ip(_run_text(["ip", "-o", "-4", "addr", "show"]) or "")
    found: dict[str, tuple[str, ...]] = {}
    for name, addrs in psutil.net_if_addrs().items():
        v4 = tuple(a.address for a in addrs if a.family == socket.AF_INET)
        if v4:
            found[name] = v4
    return found


def _interfaces_from_ip(text: str) -> dict[str, tuple[str, ...]]:
    found: dict[str, list[str]] = {}
    for line in text.splitlines():
        fields = line.split()
        if len(fields) >= 4 and fields[2] == "inet":
            found.setdefault(fields[1].split("@")[0], []).append(fields[3].split("/")[0])
    return {name: tuple(addrs) for name, addrs in found.items()}


def nvidia_gpus(visible: str | None = None) -> tuple[str, ...]:
    """The NVIDIA GPUs a worker started from here would see, as `nvidia-smi -L` names them, filtered by
    CUDA_VISIBLE_DEVICES (`visible`: indices or UUIDs; "" or "-1" hides them all). Asked of the driver's
    tool, not of a framework, so that the launcher stays light and needs no framework built for CUDA. ()
    where there is no NVIDIA driver."""
    listing = _run_text(["nvidia-smi", "-L"]) or ""
    gpus = [line.strip() for line in listing.splitlines() if line.startswith("GPU ")]
    if visible is None:
        return tuple(gpus)
    chosen = []
    for entry in (e.strip() for e in visible.split(",")):
        found = [g for i, g in enumerate(gpus) if entry == str(i) or (entry and f"UUID: {entry}" in g)]
        if not found:
            break  # CUDA stops at the first entry that names no GPU
        chosen.append(found[0])
    return tuple(chosen)


def _run_text(argv: Sequence[str], timeout: float = 10.0) -> str | None:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout).stdout
    except (OSError, subprocess.SubprocessError):
        return None


def resolve_ipv4(name: str) -> tuple[str, ...]:
    """All IPv4 addresses `name` resolves to here (hosts file, then DNS), in resolver order."""
    try:
        infos = socket.getaddrinfo(name, None, socket.AF_INET, socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError):
        return ()
    return tuple(dict.fromkeys(info[4][0] for info in infos))


def source_address_for(address: str, port: int = 9) -> str | None:
    """The local address the kernel would use to reach `address` (a UDP connect sends nothing)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        try:
            sock.connect((address, port))
            return sock.getsockname()[0]
        except OSError:
            return None


def port_is_free(port: int, address: str = "") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((address, port))
            return True
        except OSError:
            return False


def _memlock() -> tuple[int | None, int | None]:
    soft, hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    unlimited = resource.RLIM_INFINITY
    return (None if soft == unlimited else soft), (None if hard == unlimited else hard)


def _rdma_devices() -> tuple[str, ...]:
    try:
        return tuple(sorted(os.listdir("/sys/class/infiniband")))
    except OSError:
        return ()


def check_ssh(host: str, intent: Intent, timeout_s: int = 5) -> SSHResult:
    """Can we ssh to `host` without a password, the way horovodrun will? Also lists its interfaces."""
    argv = ["ssh", "-o", "PasswordAuthentication=no", "-o", "StrictHostKeyChecking=no"]
    argv += ["-o", "BatchMode=yes", "-o", f"ConnectTimeout={timeout_s}"]
    if intent.ssh_port:
        argv += ["-p", str(intent.ssh_port)]
    if intent.ssh_identity_file:
        argv += ["-i", intent.ssh_identity_file]
    argv += [host, "ip -o -4 addr show"]
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s + 10)
    except FileNotFoundError:
        return SSHResult(False, "no ssh client on PATH")
    except subprocess.TimeoutExpired:
        return SSHResult(False, f"`{shlex.join(argv[:-1])}` did not answer within {timeout_s + 10} s")
    if proc.returncode != 0:
        return SSHResult(False, (proc.stderr.strip().splitlines() or [f"exit status {proc.returncode}"])[-1])
    names = tuple(_interfaces_from_ip(proc.stdout))
    return SSHResult(True, "ok", names or None)


def gather(intent: Intent, build: BuildInfo | None = None, ssh: bool = True) -> Facts:
    """Collect the facts for `intent` from this machine (and, over ssh, from the hosts it names)."""
    hostname = socket.gethostname()
    interfaces = local_interfaces()
    local = {a for addrs in interfaces.values() for a in addrs}
    soft, hard = _memlock()

    remote, local_names = [], []
    routes: dict[str, Route] = {}
    for host in intent.hosts:
        addresses = resolve_ipv4(host.name)
        if addresses and (set(addresses) & local or all(is_loopback(a) for a in addresses)):
            local_names.append(host.name)
            continue
        remote.append(host.name)
        routes[host.name] = _route(host.name, addresses, interfaces)

    master_is_local = master_free = master_address = None
    if intent.master:
        addresses = resolve_ipv4(intent.master)
        master_address = addresses[0] if addresses else None
        master_is_local = bool(addresses) and (bool(set(addresses) & local) or is_loopback(addresses[0]))
        if master_is_local:
            if intent.master_port:
                master_free = port_is_free(intent.master_port)
        else:
            routes[intent.master] = _route(intent.master, addresses, interfaces)

    ssh_results = {}
    if ssh and remote:
        ssh_results = {name: check_ssh(name, intent) for name in remote}

    return Facts(
        intent=intent,
        hostname=hostname,
        hostname_addresses=resolve_ipv4(hostname),
        interfaces=interfaces,
        memlock_soft=soft,
        memlock_hard=hard,
        rdma_devices=_rdma_devices(),
        build=build,
        remote_hosts=tuple(remote),
        local_hosts=tuple(local_names),
        routes=routes,
        ssh=ssh_results,
        master_port_free=master_free,
        master_is_local=master_is_local,
        master_address=master_address,
        nvidia_gpus=nvidia_gpus(environment.current().cuda_visible_devices),
    )


def _route(name: str, addresses: Sequence[str], interfaces: Mapping[str, Sequence[str]]) -> Route:
    if not addresses:
        return Route(name, error=f"{name!r} does not resolve to an IPv4 address here")
    source = source_address_for(addresses[0])
    if source is None:
        return Route(name, addresses[0], error=f"no route from this host to {addresses[0]}")
    iface = next((n for n, addrs in interfaces.items() if source in addrs), None)
    return Route(name, addresses[0], source, iface)
