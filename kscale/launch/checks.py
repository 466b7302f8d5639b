"""Checks: small pure functions from `Facts` to findings, each finding with the fix.

`kscale doctor` prints them all; `kscale run` runs the ones that decide whether a launch can work
(`preflight`). A check never touches the system, so tests fake any machine by building a `Facts`.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Iterable

from kscale.launch.facts import HOROVOD_INSTALL, Facts, is_loopback


class Level(str, enum.Enum):
    OK = "ok"
    INFO = "info"
    WARN = "warn"
    ERROR = "error"  # a launch would fail


@dataclasses.dataclass(frozen=True)
class Finding:
    level: Level
    topic: str
    message: str
    fix: str = ""

    def render(self) -> str:
        mark = {Level.OK: "ok  ", Level.INFO: "info", Level.WARN: "WARN", Level.ERROR: "FAIL"}[self.level]
        text = f"[{mark}] {self.topic}: {self.message}"
        if self.fix:
            text += "\n" + "\n".join(
                "       fix: " + line if i == 0 else "            " + line
                for i, line in enumerate(self.fix.splitlines())
            )
        return text


Check = Callable[[Facts], list[Finding]]

MEMLOCK_FIX = (
    "raise the locked-memory limit to unlimited: add to /etc/security/limits.conf\n"
    "* soft memlock unlimited\n"
    "* hard memlock unlimited\n"
    "then log in again (in Docker: --ulimit memlock=-1; under systemd: LimitMEMLOCK=infinity)"
)


def controller(facts: Facts) -> str | None:
    """Horovod's controller for the launch: the one asked for, else Horovod's default (MPI if built); None
    where another engine runs the job (TF_CONFIG workers or JAX processes connect without one)."""
    if facts.intent.engine != "horovod":
        return None
    if facts.intent.controller:
        return facts.intent.controller
    if facts.build is not None and facts.build.mpi:
        return "mpi"
    return "gloo"


def check_horovod_build(facts: Facts) -> list[Finding]:
    build = facts.build
    if build is None:
        return []
    if build.horovod_version is None:
        if build.error:
            return [
                Finding(
                    Level.ERROR,
                    "horovod",
                    f"could not inspect the Horovod build: {build.error}.",
                    "run `python -c 'import horovod.tensorflow'` to see why it fails",
                )
            ]
        return [Finding(Level.ERROR, "horovod", "Horovod is not installed in this Python.", HOROVOD_INSTALL)]
    if not build.tensorflow:
        return [
            Finding(
                Level.ERROR,
                "horovod",
                f"Horovod {build.horovod_version} was built without TensorFlow support "
                f"(import horovod.tensorflow failed: {build.error}).",
                "reinstall Horovod against the installed TensorFlow with HOROVOD_WITH_TENSORFLOW=1: "
                + HOROVOD_INSTALL,
            )
        ]
    built = [name for name in ("gloo", "mpi", "nccl", "ddl", "ccl", "cuda", "rocm") if getattr(build, name)]
    findings = [
        Finding(
            Level.OK,
            "versions",
            f"TensorFlow {build.tensorflow_version}, Keras {build.keras_version}, Horovod "
            f"{build.horovod_version} built with TensorFlow + {', '.join(built) or 'nothing else'}",
        )
    ]
    wanted = controller(facts)
    if wanted is not None and not getattr(build, wanted):
        flag = (
            "HOROVOD_WITH_GLOO=1 (needs cmake)" if wanted == "gloo" else "HOROVOD_WITH_MPI=1 (needs mpicxx)"
        )
        other = "--mpi" if build.mpi else "--gloo" if build.gloo else None
        findings.append(
            Finding(
                Level.ERROR,
                "controller",
                f"the launch uses the {wanted.upper()} controller but Horovod was built without it.",
                f"reinstall Horovod with {flag}" + (f", or launch with {other}" if other else ""),
            )
        )
    return findings


def check_gpus(facts: Facts) -> list[Finding]:
    build = facts.build
    if build is not None and build.gpus is not None:  # Horovod's engine: the GPUs TensorFlow sees
        gpus, seen_by = build.gpus, "TensorFlow"
    elif facts.nvidia_gpus is not None:
        gpus, seen_by = facts.nvidia_gpus, "the NVIDIA driver (nvidia-smi)"
    else:
        return []
    if not gpus:
        return [Finding(Level.INFO, "gpus", f"{seen_by} shows no GPU: training runs on CPU.")]
    findings = [Finding(Level.OK, "gpus", f"{len(gpus)} visible to {seen_by}: {', '.join(gpus)}")]
    if build is not None and build.gpus is not None and not build.nccl:
        findings.append(
            Finding(
                Level.WARN,
                "gpus",
                "GPUs are visible but Horovod was built without NCCL: GPU gradients are copied to the "
                "CPU for every allreduce.",
                "reinstall Horovod with HOROVOD_GPU_OPERATIONS=NCCL",
            )
        )
    if facts.intent.processes_here is not None:
        problem = shared_gpu_problem(facts.intent.engine, facts.intent.processes_here, gpus)
        if problem:
            message, fix = problem
            findings.append(Finding(Level.ERROR, "gpus", message, fix))
    return findings


#: Engines whose workers each take one GPU of their own (torch: NCCL; JAX: one process per device).
ONE_GPU_PER_PROCESS_ENGINES = ("torch", "jax")


def shared_gpu_problem(engine: str, processes: int, gpus: tuple[str, ...]) -> tuple[str, str] | None:
    """Why `processes` workers of `engine` on a host showing `gpus` would fail, and the fix; None if they
    would not. torch.distributed's NCCL refuses two processes on one GPU at the first collective ("Duplicate
    GPU detected"), and a JAX worker given a GPU index the host lacks falls back to its CPU: a job whose
    processes disagree on their devices. Said before the launch, in seconds."""
    if engine not in ONE_GPU_PER_PROCESS_ENGINES or not gpus or processes <= len(gpus):
        return None
    reason = (
        "torch.distributed's GPU backend, NCCL, cannot run two processes on one GPU"
        if engine == "torch"
        else "a process left without one would find no GPU and train on its CPU, unlike the others"
    )
    return (
        f"{processes} worker processes on this host, but only {len(gpus)} GPU(s) are visible "
        f"({', '.join(gpus)}): the {engine} engine gives each process a GPU of its own; {reason}.",
        f"start at most {len(gpus)} process(es) on this host (-np {len(gpus)}, or --nproc-per-node "
        f"{len(gpus)}); or, to try several processes without more GPUs, hide them so that the workers "
        "train on CPUs over Gloo: CUDA_VISIBLE_DEVICES= kscale run -np 2 -- python train.py",
    )


def check_memlock(facts: Facts) -> list[Finding]:
    if facts.memlock_soft is None:
        return [Finding(Level.OK, "memlock", "ulimit -l is unlimited")]
    kb = facts.memlock_soft // 1024
    uses_rdma = controller(facts) == "mpi" or bool(facts.rdma_devices)
    if not uses_rdma:
        return [Finding(Level.INFO, "memlock", f"ulimit -l is {kb} KB (matters only for MPI / RDMA)")]
    why = "MPI" if controller(facts) == "mpi" else f"RDMA devices ({', '.join(facts.rdma_devices)})"
    return [
        Finding(
            Level.WARN,
            "memlock",
            f"ulimit -l is {kb} KB and {why} will pin memory: Open MPI / verbs fail with "
            "'Failed to create a completion queue (CQ) ... Cannot allocate memory'.",
            MEMLOCK_FIX,
        )
    ]


def _hosts_fix(facts: Facts, address: str | None) -> str:
    target = address or "<this host's address on the network the other hosts use>"
    return (
        f"map the host name to its reachable address: add the line\n"
        f"{target} {facts.hostname}\n"
        f"to /etc/hosts on this host (or fix the DNS record), and remove '{facts.hostname}' from any "
        f"127.x line"
    )


def _reachable_address(facts: Facts) -> str | None:
    """The local address the other hosts are reached from (so it is the one they can reach us at)."""
    for route in facts.routes.values():
        if route.source and not is_loopback(route.source):
            return route.source
    if facts.intent.master and facts.master_is_local:
        for addrs in facts.interfaces.values():
            for addr in addrs:
                if not is_loopback(addr):
                    return addr
    return None


def check_hostname(facts: Facts) -> list[Finding]:
    """Gloo's fallback: Horovod 0.28.1 builds its process-set contexts without HOROVOD_GLOO_IFACE, so
    Gloo listens on whatever the *host name* resolves to. 127.0.0.1 there means no other host can connect."""
    name, addresses = facts.hostname, facts.hostname_addresses
    reachable = _reachable_address(facts)
    if not facts.multi_host:
        if addresses and is_loopback(addresses[0]):
            return [
                Finding(
                    Level.INFO,
                    "hostname",
                    f"{name!r} resolves to {addresses[0]}: fine on one host, but a multi-host Gloo job "
                    "would fail (see `kscale doctor -H ...`).",
                )
            ]
        return [Finding(Level.OK, "hostname", f"{name!r} resolves to {', '.join(addresses) or '?'}")]
    if controller(facts) != "gloo":
        # TensorFlow's and JAX's servers listen on every address and connect to the names the launch
        # lists (TF_CONFIG, the coordinator address): the host's own name plays no part.
        return [Finding(Level.OK, "hostname", f"{name!r} resolves to {', '.join(addresses) or '?'}")]
    gloo_error = (
        "Horovod 0.28.1 with Gloo ignores HOROVOD_GLOO_IFACE for its process-set context and listens on "
        "the address the host name resolves to, so the job dies with "
        "'gloo::IoException ... connect [{addr}]:PORT: Connection refused' (or 'Connect timeout [{addr}]')."
    )
    if not addresses:
        return [
            Finding(
                Level.ERROR,
                "hostname",
                f"this host's name {name!r} does not resolve. " + gloo_error.format(addr="?"),
                _hosts_fix(facts, reachable),
            )
        ]
    first = addresses[0]
    if is_loopback(first):
        return [
            Finding(
                Level.ERROR,
                "hostname",
                f"this host's name {name!r} resolves to {first}. " + gloo_error.format(addr=first),
                _hosts_fix(facts, reachable),
            )
        ]
    if first not in facts.local_addresses:
        return [
            Finding(
                Level.ERROR,
                "hostname",
                f"{name!r} resolves to {first}, which is not an address of this host (a stale /etc/hosts "
                "or DNS entry?); Gloo would listen on an address it does not own.",
                _hosts_fix(facts, reachable),
            )
        ]
    iface = facts.interface_of(first)
    used = {r.interface for r in facts.routes.values() if r.interface}
    if used and iface not in used:
        return [
            Finding(
                Level.WARN,
                "hostname",
                f"{name!r} resolves to {first} on {iface}, but the other hosts are reached through "
                f"{', '.join(sorted(used))}; they may not be able to connect back to {first}.",
                _hosts_fix(facts, reachable),
            )
        ]
    return [Finding(Level.OK, "hostname", f"{name!r} resolves to {first} ({iface}), reachable by the others")]


def check_routes(facts: Facts) -> list[Finding]:
    findings = []
    for route in facts.routes.values():
        if route.error:
            findings.append(
                Finding(
                    Level.ERROR,
                    "network",
                    route.error + ".",
                    f"check the spelling of {route.name!r}, add it to /etc/hosts or DNS, and check the "
                    "route (ip route get ADDRESS)",
                )
            )
        else:
            findings.append(
                Finding(
                    Level.OK,
                    "network",
                    f"{route.name} ({route.address}) is reached from {route.source} on {route.interface}",
                )
            )
    return findings


def check_interfaces(facts: Facts) -> list[Finding]:
    """Gloo uses one interface name on every host (HOROVOD_GLOO_IFACE): it must exist everywhere."""
    findings = []
    missing = [nic for nic in facts.intent.nics if nic not in facts.interfaces]
    if missing:
        findings.append(
            Finding(
                Level.ERROR,
                "interfaces",
                f"--network-interfaces names {', '.join(missing)}, which this host does not have "
                f"(it has {', '.join(sorted(facts.interfaces))}).",
                "pass an interface name that exists on every host",
            )
        )
    if not facts.remote_hosts:
        return findings
    used = sorted({r.interface for r in facts.routes.values() if r.interface})
    if len(used) > 1 and not facts.intent.nics:
        findings.append(
            Finding(
                Level.WARN,
                "interfaces",
                f"the other hosts are reached through different interfaces ({', '.join(used)}); Horovod "
                "uses one interface for all of them.",
                f"pick the one every host shares: --network-interfaces {used[0]}",
            )
        )
    remote_names = [set(r.interfaces) for r in facts.ssh.values() if r.ok and r.interfaces]
    if remote_names:
        common = set(facts.interfaces).intersection(*remote_names) - {"lo"}
        if common:
            findings.append(
                Finding(Level.OK, "interfaces", f"common to all hosts: {', '.join(sorted(common))}")
            )
        else:
            findings.append(
                Finding(
                    Level.ERROR,
                    "interfaces",
                    "no network interface name (other than lo) exists on every host; Horovod's Gloo "
                    "transport needs one (HOROVOD_GLOO_IFACE).",
                    "give the interfaces on the shared network the same name on every host (udev / "
                    "systemd-networkd rename), or use MPI",
                )
            )
    return findings


def check_ssh(facts: Facts) -> list[Finding]:
    findings = []
    for host, result in facts.ssh.items():
        if result.ok:
            findings.append(Finding(Level.OK, "ssh", f"passwordless ssh to {host} works"))
            continue
        port = f" -p {facts.intent.ssh_port}" if facts.intent.ssh_port else ""
        findings.append(
            Finding(
                Level.ERROR,
                "ssh",
                f"horovodrun starts remote workers over ssh, and `ssh{port} {host}` failed: {result.detail}",
                f"set up key login (ssh-keygen; ssh-copy-id{port} {host}); if sshd listens on another "
                "port pass -p PORT (e.g. -p 12345 for containers that run their own sshd); or start "
                "kscale run on each host instead: --nnodes N --node-rank R --master ADDR",
            )
        )
    return findings


def check_mpi_hostnames(facts: Facts) -> list[Finding]:
    """Open MPI matches host-list names against each machine's own host name (seed: 'either not
    allocated or oversubscribed its slots' when the list used interface aliases such as ib1/ib2)."""
    if controller(facts) != "mpi":
        return []
    short = facts.hostname.split(".")[0]
    aliases = [
        h for h in facts.local_hosts if h not in (facts.hostname, short, "localhost") and not is_loopback(h)
    ]
    if not aliases:
        return []
    return [
        Finding(
            Level.WARN,
            "mpi hosts",
            f"the host list calls this host {', '.join(aliases)}, but its host name is {facts.hostname!r}; "
            "Open MPI then reports that a host was 'not allocated or oversubscribed its slots'.",
            f"use the host names in -H (e.g. {facts.hostname}:N), or make the host name match the name "
            f"in the list (hostnamectl set-hostname {aliases[0]})",
        )
    ]


def check_ports(facts: Facts) -> list[Finding]:
    if facts.master_port_free is None:
        return []
    port = facts.intent.master_port
    if facts.master_port_free:
        return [Finding(Level.OK, "ports", f"rendezvous port {port} is free on this host (node 0)")]
    return [
        Finding(
            Level.ERROR,
            "ports",
            f"rendezvous port {port} is already in use on this host, so node 0 cannot serve the rendezvous.",
            f"pick another port on every node: --master {facts.intent.master}:<free port>, or stop what "
            f"listens there (ss -ltnp 'sport = :{port}')",
        )
    ]


#: Everything `kscale doctor` runs, in report order.
ALL_CHECKS: tuple[Check, ...] = (
    check_horovod_build,
    check_gpus,
    check_memlock,
    check_hostname,
    check_routes,
    check_interfaces,
    check_ssh,
    check_mpi_hostnames,
    check_ports,
)


def run_checks(facts: Facts, checks: Iterable[Check] = ALL_CHECKS) -> list[Finding]:
    return [finding for check in checks for finding in check(facts)]


def errors(findings: Iterable[Finding]) -> list[Finding]:
    return [f for f in findings if f.level is Level.ERROR]
