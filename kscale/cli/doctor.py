"""`kscale doctor`: one readable report on whether this host can take part in a job (Horovod, TensorFlow
multi-worker or JAX: the lane's engine, or `--engine`), each problem with its fix, and a non-zero exit
status when a launch would fail.

Give it what you are about to launch (`-H host1:2,host2:2`, or `--nnodes 2 --master ADDR:PORT` for a
per-node launch) and it also checks names, routes, SSH and ports for that job. The checks live in
`kscale.launch.checks`; this module only gathers the facts and prints.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from kscale.errors import KScaleError
from kscale.launch import checks, engines
from kscale.launch.facts import BuildInfo, Intent, gather, probe_build
from kscale.launch.hosts import parse_host_list, parse_hostfile
from kscale.launch.pernode import parse_master

DESCRIPTION = "Check this host (and the job's hosts) for what breaks Horovod launches; print each fix."


def doctor_command_parser(subparsers: Any = None) -> argparse.ArgumentParser:
    if subparsers is not None:
        parser = subparsers.add_parser(
            "doctor", help=DESCRIPTION, description=DESCRIPTION, allow_abbrev=False
        )
    else:
        parser = argparse.ArgumentParser("kscale doctor", description=DESCRIPTION, allow_abbrev=False)
    hosts = parser.add_mutually_exclusive_group()
    hosts.add_argument(
        "-H", "--hosts", help="the job's host list, host1:slots,host2:slots (as for kscale run)"
    )
    hosts.add_argument("--hostfile", help="the job's hostfile (lines 'host slots=N')")
    parser.add_argument("--master", help="per-node launch: node 0's ADDR[:PORT]")
    parser.add_argument("--nnodes", type=int, default=None, help="per-node launch: number of nodes")
    parser.add_argument(
        "-np",
        "--num-proc",
        "--nproc-per-node",
        dest="processes_here",
        type=int,
        help="worker processes this host will start (checked against its GPUs for the torch and jax engines)",
    )
    controller = parser.add_mutually_exclusive_group()
    controller.add_argument("--gloo", dest="controller", action="store_const", const="gloo")
    controller.add_argument("--mpi", dest="controller", action="store_const", const="mpi")
    parser.add_argument("-p", "--ssh-port", type=int, help="SSH port of the remote hosts")
    parser.add_argument("-i", "--ssh-identity-file", help="SSH key for the remote hosts")
    parser.add_argument("--network-interfaces", help="interfaces the job will use, comma separated")
    parser.add_argument("--no-ssh", action="store_true", help="do not try SSH to the remote hosts")
    parser.add_argument(
        "--engine",
        choices=engines.ENGINES,
        help="the engine to check for (default: what kscale run would use here)",
    )
    parser.set_defaults(func=doctor_command)
    return parser


def intent_from_args(args: argparse.Namespace, engine: str = "horovod") -> Intent:
    hosts = (
        parse_host_list(args.hosts) if args.hosts else parse_hostfile(args.hostfile) if args.hostfile else []
    )
    master = port = None
    if args.master:
        master, port = parse_master(args.master)
    nnodes = args.nnodes if args.nnodes is not None else (2 if args.master else 1)
    nics = tuple(n.strip() for n in (args.network_interfaces or "").split(",") if n.strip())
    return Intent(
        hosts=tuple(hosts),
        master=master,
        master_port=port,
        nnodes=nnodes,
        controller=args.controller or ("gloo" if args.master else None),
        ssh_port=args.ssh_port,
        ssh_identity_file=args.ssh_identity_file,
        nics=nics,
        engine=engine,
        processes_here=args.processes_here,
    )


def report(facts: Any, findings: list[checks.Finding]) -> str:
    lines = [f"kscale doctor on {facts.hostname}"]
    ifaces = ", ".join(f"{name} {'/'.join(addrs)}" for name, addrs in sorted(facts.interfaces.items()))
    lines.append(f"  interfaces: {ifaces or 'none'}")
    if facts.intent.hosts:
        lines.append(
            f"  hosts: {', '.join(map(str, facts.intent.hosts))} (remote: {', '.join(facts.remote_hosts) or 'none'})"
        )
    if facts.intent.master:
        lines.append(
            f"  per-node launch: {facts.intent.nnodes} nodes, master {facts.intent.master}:{facts.intent.master_port}"
        )
    lines.append("")
    lines += [finding.render() for finding in findings]
    problems = checks.errors(findings)
    warnings = [f for f in findings if f.level is checks.Level.WARN]
    lines.append("")
    if problems:
        lines.append(f"{len(problems)} problem(s) that would make a launch fail, {len(warnings)} warning(s).")
    else:
        lines.append(f"No problem that would stop a launch; {len(warnings)} warning(s).")
    return "\n".join(lines)


def _engine(chosen: str | None) -> tuple[str | None, checks.Finding]:
    """The engine the launch will use, and a line saying which (the lane decides it; kscale.launch.engines)."""
    if chosen:
        return chosen, checks.Finding(checks.Level.INFO, "engine", f"{chosen} (--engine)")
    try:
        engine = engines.default_engine()
    except KScaleError as err:
        return None, checks.Finding(checks.Level.INFO, "engine", f"none for several processes here: {err}")
    return engine, checks.Finding(
        checks.Level.INFO, "engine", f"{engine}: what `kscale run -np N` launches here"
    )


def doctor_command(args: argparse.Namespace, build: BuildInfo | None = None) -> int:
    """Gather, check, print; exit status 1 when a launch would fail. `build` fakes the probe in tests."""
    engine, engine_finding = _engine(args.engine)
    try:
        intent = intent_from_args(args, engine or "horovod")
    except KScaleError as err:
        print(f"kscale doctor: error: {err}", file=sys.stderr)
        return 2
    if engine == "horovod":
        build = build or probe_build(gpus=True)
    else:
        build = None  # the tf and jax engines need no Horovod: its build is not checked
    facts = gather(intent, build=build, ssh=not args.no_ssh)
    findings = [engine_finding, *checks.run_checks(facts)]
    print(report(facts, findings))
    return 1 if checks.errors(findings) else 0


def main(argv: list[str] | None = None) -> int:
    args = doctor_command_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
