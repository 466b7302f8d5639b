"""Launching a training job as a library: `kscale.launch.run(command, num_proc=2)` is `kscale run -np 2 --
command`, which only parses its arguments for it.

The engine (kscale.launch.engines) picks what runs the workers: `horovod` hands the job to Horovod's
runner (SSH to other hosts, as horovodrun), or starts this node's part of a per-node launch without SSH
(kscale.launch.pernode: rendezvous, node agent, heartbeats); `tf` and `jax` start this node's workers
with TF_CONFIG or Keras' KERAS_DISTRIBUTION_* variables (kscale.launch.workers), locally with `num_proc`,
or one launch per node with `nnodes/node_rank/master/nproc_per_node` (the tf engine also needs every
node's address in `hosts` there: TF_CONFIG lists every worker's address). Before a horovodrun-style
launch, a preflight check (the script exists, -np fits the slots, Horovod has TensorFlow and the
controller) makes a broken setup fail in a second with the fix, not in a traceback.

Horovod's options are not redeclared: what kscale does not know is passed to Horovod's own parser.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import importlib.util
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from kscale import _horovod_private, environment, frameworks
from kscale.errors import LaunchError, MissingDependencyError
from kscale.launch import checks as checks_mod
from kscale.launch import engines, exits, pernode, workers
from kscale.launch import facts as facts_mod
from kscale.launch.facts import HOROVOD_INSTALL, BuildInfo, Intent, gather, probe_build
from kscale.launch.hosts import Host, format_hosts, parse_host_list, parse_hostfile, total_slots


@dataclasses.dataclass(frozen=True)
class PerNode:
    """A per-node launch (no SSH; the same call on every node), or none: every field None."""

    nnodes: int | None = None
    node_rank: int | None = None
    master: str | None = None  # node 0's ADDR[:PORT]
    nproc_per_node: int | None = None
    heartbeat_timeout: float = 30.0


def run(
    command: Sequence[str],
    *,
    num_proc: int | None = None,
    hosts: str | None = None,
    engine: str | None = None,
    nnodes: int | None = None,
    node_rank: int | None = None,
    master: str | None = None,
    nproc_per_node: int | None = None,
    heartbeat_timeout: float = 30.0,
    preflight: bool = True,
    horovod_options: Sequence[str] = (),
    max_restarts: int = 0,
) -> int:
    """Launch `command` (e.g. ["python", "train.py"]) on every worker and wait; the job's exit status.

    `num_proc` workers on `hosts` ("host:slots,...", Horovod's form; default this host), or this node's
    `nproc_per_node` workers of a per-node launch (`nnodes`, `node_rank`, `master`). `engine`: horovod,
    tf or jax (default: what the installed stack runs with several processes). `horovod_options`:
    horovodrun's own, e.g. ["--fusion-threshold-mb", "32"]. `max_restarts`: start the job again, up to that
    many times, when it fails or stops for a preemption notice (the script's BackupAndRestore resumes it).
    Raises a KScaleError when the launch cannot work (the message says the fix); a worker's failure is the
    returned status.
    """
    options = [*(["-np", str(num_proc)] if num_proc is not None else []), *(["-H", hosts] if hosts else [])]
    nodes = PerNode(nnodes, node_rank, master, nproc_per_node, heartbeat_timeout)
    return launch(
        [*options, *horovod_options],
        list(command),
        engine=engine,
        nodes=nodes,
        preflight=preflight,
        max_restarts=max_restarts,
    )


def launch(
    options: list[str],
    command: list[str],
    *,
    engine: str | None = None,
    nodes: Any = PerNode(),
    preflight: bool = True,
    build: BuildInfo | None = None,
    max_restarts: int = 0,
) -> int:
    """`run`, with horovodrun-style option tokens (what `kscale run` passes on). `nodes`: a PerNode (or
    anything with its fields); `build` fakes the Horovod build in tests."""
    if max_restarts < 0:
        raise LaunchError(f"--max-restarts {max_restarts}: give 0 or more restarts.")
    exits.signals_received.clear()
    for restart in range(max_restarts + 1):
        code = _launch_once(options, command, engine, nodes, preflight and restart == 0, build)
        if code == 0 or exits.signals_received or restart == max_restarts:
            return code
        print(
            f"kscale run: the job {exits.describe_status(code)}; starting it again (restart {restart + 1} of "
            f"{max_restarts}): BackupAndRestore resumes from its last backup.",
            file=sys.stderr,
            flush=True,
        )
    return code


def _launch_once(
    options: list[str],
    command: list[str],
    engine: str | None,
    nodes: Any,
    preflight: bool,
    build: BuildInfo | None,
) -> int:
    spec = node_spec(nodes, os.environ)
    engine = engine or engines.default_engine()
    with exits.preemption_marker() as preempted:
        if engine != "horovod":
            code = run_engine(engine, spec, options, command, not preflight)
        else:
            with _legacy_keras_for_the_workers():
                if spec is not None:
                    code = run_pernode(spec, options, command, not preflight, build)
                else:
                    code = _launch_horovod(options, command, preflight, build)
        return exits.job_status(code, preempted)


@contextlib.contextmanager
def _legacy_keras_for_the_workers() -> Iterator[None]:
    """Horovod works with Keras 2 only on TF >= 2.16 and reads tf.keras when it is imported: its workers,
    which inherit this process's environment, get TF_USE_LEGACY_KERAS=1 unless the user set it. Only
    while they run: a Python program that called kscale.launch.run keeps its own environment."""
    if not frameworks.legacy_keras_needed() or "TF_USE_LEGACY_KERAS" in os.environ:
        yield
        return
    os.environ["TF_USE_LEGACY_KERAS"] = "1"
    try:
        yield
    finally:
        os.environ.pop("TF_USE_LEGACY_KERAS", None)


def _launch_horovod(options: list[str], command: list[str], preflight: bool, build: BuildInfo | None) -> int:
    hvd = parse_horovod_args([*options, *command])
    if preflight:
        hosts, build = check_launch(hvd, build)
    else:
        hosts = host_list(hvd)
    # Horovod gets a clean host:slots list (its hostfile parser fails on comments and blank lines).
    hvd.hosts, hvd.hostfile = format_hosts(hosts), None
    if _elastic(hvd) and not hvd.nics and _all_local(_elastic_hosts(hvd, hosts)):
        hvd.nics = _loopback_interfaces()
    return launch_horovodrun(hvd, build)


def parse_horovod_args(tokens: Sequence[str]) -> argparse.Namespace:
    """Parse with Horovod's own parser, so every horovodrun option works as documented there."""
    try:
        return _horovod_private.parse_horovodrun_args(tokens)
    except ImportError as err:
        raise MissingDependencyError(
            f"kscale run needs Horovod, which is not importable ({err}). Install it: " + HOROVOD_INSTALL
        ) from err


_PYTHON = re.compile(r"^python[0-9.]*$")
#: Interpreter options that take a value (python -W ignore script.py).
_PYTHON_VALUE_OPTIONS = {"-W", "-X", "--check-hash-based-pycs"}


def check_command(command: Sequence[str], cwd: str | Path | None = None) -> None:
    """Fail now, not once per worker, when the command cannot start: no command, no script, no module."""
    if not command:
        raise LaunchError("no command to run; put it after `--`, e.g. kscale run -np 2 -- python train.py")
    cwd = Path(cwd or os.getcwd())
    program = command[0]
    if _PYTHON.match(Path(program).name) or program == sys.executable:
        i = 1
        while i < len(command) and command[i].startswith("-") and command[i] != "-":
            option = command[i]
            if option == "-c":
                return
            if option == "-m":
                if i + 1 >= len(command):
                    raise LaunchError(f"`{' '.join(command)}`: -m needs a module name.")
                _check_module(command[i + 1], cwd)
                return
            i += 2 if option in _PYTHON_VALUE_OPTIONS else 1
        if i >= len(command):
            raise LaunchError(f"`{' '.join(command)}` names no script: expected e.g. `python train.py`.")
        script = Path(command[i])
        if not (cwd / script).is_file():
            raise LaunchError(
                f"training script {str(script)!r} not found (looked in {cwd}). Check the path; on several "
                "hosts it must exist at the same path on each."
            )
        return
    if "/" in program:
        path = cwd / program
        if not path.is_file() or not os.access(path, os.X_OK):
            raise LaunchError(f"{program!r} is not an executable file (looked in {cwd}).")
    elif shutil.which(program) is None:
        raise LaunchError(f"{program!r} is not on PATH; give its full path or `python script.py`.")


def _check_module(module: str, cwd: Path) -> None:
    sys.path.insert(0, str(cwd))  # `python -m` puts the working directory first
    try:
        found = importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        found = False
    except Exception:
        return
    finally:
        sys.path.remove(str(cwd))
    if not found:
        raise LaunchError(f"`python -m {module}`: no module named {module!r} in this Python (cwd {cwd}).")


def _raise_findings(findings: Sequence[checks_mod.Finding]) -> None:
    problems = checks_mod.errors(findings)
    if problems:
        text = "\n".join(f.render() for f in problems)
        raise LaunchError(
            f"preflight found {len(problems)} problem(s):\n{text}\n(--no-preflight launches anyway)"
        )


def host_list(args: argparse.Namespace) -> list[Host]:
    if args.hosts:
        return parse_host_list(args.hosts)
    if args.hostfile:
        return parse_hostfile(args.hostfile)
    return [Host("localhost", args.num_proc)]


def check_launch(args: argparse.Namespace, build: BuildInfo | None = None) -> tuple[list[Host], BuildInfo]:
    """Checks for a horovodrun-style launch, cheapest first; returns the host list and the Horovod build.
    Raises LaunchError with the fix."""
    check_command(args.command)
    hosts = host_list(args)
    if args.num_proc > total_slots(hosts):
        raise LaunchError(
            f"-np {args.num_proc} asks for more processes than the host list has slots "
            f"({format_hosts(hosts)} = {total_slots(hosts)}). Lower -np or add slots, e.g. "
            f"-H {hosts[0].name}:{hosts[0].slots + args.num_proc - total_slots(hosts)}."
        )
    build = build or probe_build()
    controller = "gloo" if args.use_gloo else "mpi" if args.use_mpi else None
    intent = Intent(hosts=tuple(hosts), controller=controller, nics=tuple(sorted(args.nics or ())))
    facts = gather(intent, build=build, ssh=False)
    found = checks_mod.run_checks(
        facts,
        (
            checks_mod.check_horovod_build,
            checks_mod.check_hostname,
            checks_mod.check_routes,
            checks_mod.check_interfaces,
        ),
    )
    _raise_findings(found)
    return hosts, build


def launch_horovodrun(args: argparse.Namespace, build: BuildInfo | None = None) -> int:
    """Hand the parsed options to Horovod's runner; turn its failure into an exit status."""
    known = build is not None and build.tensorflow
    try:
        _horovod_private.run_horovodrun(args, build.gloo if known else None, build.mpi if known else None)
    except (RuntimeError, ValueError) as err:  # Horovod's way of saying a worker, ssh or a check failed
        message = str(err)
        print(f"kscale run: {message.strip()}", file=sys.stderr)
        if "ssh" in message:
            print("kscale run: `kscale doctor -H HOSTS` checks ssh, names and interfaces.", file=sys.stderr)
        match = re.search(r"Exit code: (\d+)", message)
        code = int(match.group(1)) if match and 0 < int(match.group(1)) < 256 else 1
        process = re.search(r"Process name: (\S+)", message)
        if match and process:
            who = _who_failed(args, process.group(1))
            print(f"kscale run: {who} {exits.describe_status(code)}", file=sys.stderr)
        return code
    return 0


def _who_failed(args: argparse.Namespace, process: str) -> str:
    """'rank 1 on hostb' for horovodrun's 'Process name: 1' (its ranks fill the hosts in order); 'local rank
    1 on hostb' for the elastic driver's 'hostb[1]' (ranks move between hosts there)."""
    elastic = re.fullmatch(r"(.+)\[(\d+)\]", process)
    if elastic:
        host, local = elastic.groups()
        return f"local rank {local} on {socket.gethostname() if host == 'localhost' else host}"
    if not process.isdigit():
        return f"worker {process}"
    try:
        slots = _horovod_private.host_assignments(args.hosts, args.num_proc)
        host = next(slot.hostname for slot in slots if slot.rank == int(process))
    except Exception:  # elastic jobs move ranks between hosts: say what is known
        return f"rank {process}"
    return f"rank {process} on {socket.gethostname() if host == 'localhost' else host}"


def _elastic(args: argparse.Namespace) -> bool:
    """An elastic horovodrun (workers may come and go): what Horovod's own launcher checks."""
    return args.host_discovery_script is not None or args.min_num_proc is not None


def _elastic_hosts(args: argparse.Namespace, hosts: list[Host]) -> list[Host]:
    """The hosts an elastic job starts on: what its discovery script prints now, else the host list."""
    if args.host_discovery_script is None:
        return hosts
    try:
        printed = subprocess.run(
            [args.host_discovery_script], capture_output=True, text=True, timeout=30, check=True
        ).stdout
    except (OSError, subprocess.SubprocessError) as err:
        raise LaunchError(
            f"the host discovery script {args.host_discovery_script} failed ({err}); it must be an executable "
            "that prints one host:slots line per available host."
        ) from err
    return parse_host_list(",".join(line.strip() for line in printed.splitlines() if line.strip()))


def _all_local(hosts: list[Host]) -> bool:
    names = {socket.gethostname(), "localhost"}
    try:
        return all(h.name in names or facts_mod.is_loopback(socket.gethostbyname(h.name)) for h in hosts)
    except OSError:
        return False


def _loopback_interfaces() -> list[str]:
    """An elastic job on this machine alone: Horovod looks for a network interface that two hosts share,
    waits for a second host and then fails; the loopback interface is the one to use."""
    return [
        name
        for name, addresses in facts_mod.local_interfaces().items()
        if any(facts_mod.is_loopback(a) for a in addresses)
    ][:1]


def node_spec(args: Any, env: Mapping[str, str]) -> pernode.NodeSpec | None:
    """The per-node launch asked for (or implied by srun), or None for a horovodrun-style launch."""
    per_node = any(v is not None for v in (args.nnodes, args.node_rank, args.master, args.nproc_per_node))
    if not per_node:
        return None
    nnodes, node_rank, master = args.nnodes, args.node_rank, args.master
    if nnodes is None and node_rank is None:
        slurm = pernode.from_slurm(env)
        if slurm is not None:
            nnodes, node_rank, host, port = slurm
            master = master or f"{host}:{port}"
    nnodes = 1 if nnodes is None else nnodes
    if nnodes > 1 and (node_rank is None or master is None):
        raise LaunchError(
            "a per-node launch on several nodes needs --node-rank and --master on every node, e.g. "
            "--nnodes 2 --node-rank 0 --master 10.0.0.1:29400 (or start it with srun)."
        )
    addr, port = pernode.parse_master(master or "127.0.0.1")
    return pernode.NodeSpec(
        nnodes=nnodes,
        node_rank=node_rank or 0,
        master_addr=addr,
        master_port=port,
        nproc_per_node=1 if args.nproc_per_node is None else args.nproc_per_node,
        heartbeat_timeout=args.heartbeat_timeout,
    )


def run_pernode(
    spec: pernode.NodeSpec,
    options: list[str],
    command: list[str],
    skip_checks: bool,
    build: BuildInfo | None = None,
) -> int:
    """This node's part of a per-node launch. Horovod's parser still reads the options, so the tuning
    flags (--fusion-threshold-mb, --timeline-filename, ...) become the same env vars as with horovodrun."""
    total = spec.nnodes * spec.nproc_per_node
    hvd = parse_horovod_args(["-np", str(total), *options, *command])
    if hvd.num_proc != total:
        raise LaunchError(
            f"-np {hvd.num_proc} does not match --nnodes {spec.nnodes} x --nproc-per-node "
            f"{spec.nproc_per_node} = {total}; leave -np out of a per-node launch."
        )
    if hvd.hosts or hvd.hostfile:
        raise LaunchError(
            "a per-node launch takes no host list (-H/--hostfile): each node starts its own workers."
        )
    if hvd.use_mpi or hvd.use_jsrun:
        raise LaunchError("a per-node launch uses Gloo; for MPI use mpirun or kscale run -np N -H ... --mpi.")
    spec = dataclasses.replace(
        spec,
        start_timeout=float(hvd.start_timeout or spec.start_timeout),
        nics=tuple(sorted(hvd.nics or ())),
        verbose=bool(hvd.verbose),
    )
    if not skip_checks:
        check_command(hvd.command)
        build = build or probe_build()
        intent = Intent(
            master=spec.master_addr,
            master_port=spec.master_port if spec.node_rank == 0 else None,
            nnodes=spec.nnodes,
            controller="gloo",
            nics=spec.nics,
        )
        facts = gather(intent, build=build, ssh=False)
        _raise_findings(
            checks_mod.run_checks(
                facts,
                (
                    checks_mod.check_horovod_build,
                    checks_mod.check_hostname,
                    checks_mod.check_routes,
                    checks_mod.check_interfaces,
                    checks_mod.check_ports,
                ),
            )
        )
    env = _horovod_private.tuning_env(hvd)
    return pernode.launch(spec, hvd.command, {k: str(v) for k, v in env.items()})


def run_engine(
    engine: str, spec: pernode.NodeSpec | None, options: list[str], command: list[str], skip_checks: bool
) -> int:
    """Launch the tf or jax engine: this node's workers, each with the variables that make it join the job."""
    parser = argparse.ArgumentParser(f"kscale run --engine {engine}", add_help=False, allow_abbrev=False)
    parser.add_argument("-np", "--num-proc", type=int, dest="num_proc")
    parser.add_argument("-H", "--hosts")
    known, rest = parser.parse_known_args(options)
    engines.forbidden_options(engine, rest)
    if not skip_checks:
        check_command(command)
    hosts = tuple(h.split(":")[0] for h in known.hosts.split(",")) if known.hosts else ()
    if spec is None:
        if known.num_proc is None or known.num_proc < 1:
            raise LaunchError(
                f"give the number of worker processes: kscale run --engine {engine} -np N -- ..."
            )
        if hosts and any(h not in ("localhost", "127.0.0.1") for h in hosts):
            raise LaunchError(
                f"the {engine} engine starts workers on this host only; on several hosts run kscale run on "
                "each with --nnodes/--node-rank/--master (no SSH needed)."
            )
        ports = workers.free_ports(max(known.num_proc, 1))
        layout = engines.Layout(1, 0, known.num_proc, "127.0.0.1", ports[0], ports=tuple(ports))
    else:
        total = spec.nnodes * spec.nproc_per_node
        if known.num_proc is not None and known.num_proc != total:
            raise LaunchError(
                f"-np {known.num_proc} does not match --nnodes {spec.nnodes} x --nproc-per-node "
                f"{spec.nproc_per_node} = {total}; leave -np out of a per-node launch."
            )
        layout = engines.Layout(
            spec.nnodes, spec.node_rank, spec.nproc_per_node, spec.master_addr, spec.master_port, hosts=hosts
        )
    _refuse_shared_gpus(engine, layout.nproc_per_node)
    if engine == "torch":
        env, local_address = engines.torch_env(os.environ), None
        if spec is not None:
            # gloo and torchrun take this node's address from its host name unless told: 127.0.0.1 on many
            # hosts, which the other nodes cannot reach. The interface and address that reach node 0.
            master_ip = socket.gethostbyname(spec.master_addr)
            env.setdefault("GLOO_SOCKET_IFNAME", pernode.gloo_interface(spec, master_ip))
            local_address = master_ip if spec.node_rank == 0 else facts_mod.source_address_for(master_ip)
        return _run_torchrun(engines.torchrun_command(layout, command, sys.executable, local_address), env)
    return workers.run(command, engines.worker_envs(engine, layout, os.environ))


def _refuse_shared_gpus(engine: str, processes: int) -> None:
    """Stop before starting workers that would have to share a GPU (checks.shared_gpu_problem)."""
    if engine not in checks_mod.ONE_GPU_PER_PROCESS_ENGINES:
        return
    gpus = facts_mod.nvidia_gpus(environment.current().cuda_visible_devices)
    problem = checks_mod.shared_gpu_problem(engine, processes, gpus)
    if problem:
        message, fix = problem
        raise LaunchError(f"{message} To fix it: {fix}.")


def _run_torchrun(command: list[str], env: dict[str, str]) -> int:
    """Hand the job to torchrun and return its exit status (it stops every worker when one fails)."""
    if importlib.util.find_spec("torch") is None:  # not imported: the launcher starts fast
        raise LaunchError(
            "the torch engine hands the job to torchrun, which comes with PyTorch, and torch is not installed "
            "here: pip install 'kscale[torch]' (on a CPU-only machine install torch first from "
            "https://download.pytorch.org/whl/cpu)."
        )
    # SIGTERM, a scheduler's preemption notice, passes on to torchrun, which passes it on to the workers;
    # the handler before torchrun starts, so that a notice while it starts is not this process's end.
    started: list[subprocess.Popen] = []
    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGTERM, functools.partial(_pass_on_sigterm, started))
    threads: list[threading.Thread] = []
    try:
        # Its output passes through this process's streams, as the other engines' does (kscale test reads it).
        process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        with exits.notices_held():
            started.append(process)
            if signal.SIGTERM in exits.signals_received:  # the notice came while torchrun started
                process.send_signal(signal.SIGTERM)
        threads = [
            threading.Thread(target=_pass_through, args=(stream, target), daemon=True)
            for stream, target in ((process.stdout, sys.stdout), (process.stderr, sys.stderr))
        ]
        for thread in threads:
            thread.start()
        code = process.wait()
    except KeyboardInterrupt:
        exits.signals_received.append(signal.SIGINT)
        if not started:  # while torchrun started: there is none to stop
            raise
        process.send_signal(signal.SIGINT)  # torchrun stops its workers itself
        code = process.wait()
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    for thread in threads:
        thread.join()
    return code


def _pass_on_sigterm(started: list[subprocess.Popen], signum: int, frame: Any) -> None:
    exits.signals_received.append(signum)
    for process in started:
        process.send_signal(signal.SIGTERM)


def _pass_through(source: Any, target: Any) -> None:
    for line in iter(source.readline, b""):
        target.write(line.decode(errors="replace"))
        target.flush()
