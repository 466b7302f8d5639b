"""Host lists (`-H a:2,b:2`), hostfiles and SLURM node lists, with errors that show the expected form.

Horovod's own parsers (`horovod.runner.common.util.hosts`) accept only the happy path: a hostfile with
a comment or a blank line, or a host without `:slots`, ends in an IndexError or ValueError traceback.
These functions accept what people write in practice and hand Horovod a clean `host:slots,...` string,
so the launch itself still goes through Horovod's `parse_hosts` / `get_host_assignments`.
"""

from __future__ import annotations

import dataclasses
import re
import shutil
import subprocess
from collections.abc import Iterable, Sequence
from pathlib import Path

from kscale.errors import LaunchError

_HOST = re.compile(r"^[\w.-]+$")


@dataclasses.dataclass(frozen=True)
class Host:
    """One entry of a host list: a name (or address) and how many processes may run there."""

    name: str
    slots: int

    def __str__(self) -> str:
        return f"{self.name}:{self.slots}"


def parse_host_list(spec: str) -> list[Host]:
    """Parse `-H host1:2,host2:4` (what horovodrun accepts), with an error that names the bad entry."""
    hosts = []
    for raw in spec.split(","):
        entry = raw.strip()
        if not entry:
            continue
        name, sep, slots = entry.rpartition(":")
        if not sep or not _HOST.match(name) or not slots.isdigit() or int(slots) < 1:
            raise LaunchError(
                f"host list entry {entry!r} in -H {spec!r} is not of the form host:slots; expected e.g. "
                "-H localhost:2 or -H worker-0:4,worker-1:4 (slots = processes to start on that host)."
            )
        hosts.append(Host(name, int(slots)))
    if not hosts:
        raise LaunchError(f"-H {spec!r} names no hosts; expected e.g. -H worker-0:4,worker-1:4.")
    _reject_duplicates(hosts, f"-H {spec}")
    return hosts


def parse_hostfile(path: str | Path) -> list[Host]:
    """Parse an MPI-style hostfile: `host slots=N` per line; `#` comments and blank lines are skipped.

    A line with only a host name means one slot, as in Open MPI's hostfiles.
    """
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as err:
        raise LaunchError(f"cannot read hostfile {str(path)!r}: {err.strerror}. Check the path.") from None
    hosts = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        fields = line.split()
        name, slots = fields[0], 1
        for field in fields[1:]:
            key, _, value = field.partition("=")
            if key in ("slots", "max_slots") and value.isdigit() and int(value) > 0:
                if key == "slots":
                    slots = int(value)
            else:
                raise LaunchError(
                    f"{path}:{number}: {raw.strip()!r} is not 'host slots=N'; expected lines like "
                    "'worker-0 slots=4'."
                )
        if not _HOST.match(name):
            raise LaunchError(f"{path}:{number}: {name!r} is not a host name or address.")
        hosts.append(Host(name, slots))
    if not hosts:
        raise LaunchError(f"hostfile {str(path)!r} lists no hosts; expected lines like 'worker-0 slots=4'.")
    _reject_duplicates(hosts, str(path))
    return hosts


def _reject_duplicates(hosts: Sequence[Host], where: str) -> None:
    # Horovod keys its rendezvous scopes by host name: a name listed twice silently gets one local scope
    # for two hosts' worth of ranks, and the job hangs at init. Refuse it up front.
    seen = set()
    for host in hosts:
        if host.name in seen:
            raise LaunchError(
                f"host {host.name!r} is listed twice in {where}; list each host once with the total "
                f"number of slots, e.g. {host.name}:4."
            )
        seen.add(host.name)


def format_hosts(hosts: Iterable[Host]) -> str:
    """The `host:slots,...` string Horovod's `-H` and `parse_hosts` take."""
    return ",".join(str(host) for host in hosts)


def total_slots(hosts: Iterable[Host]) -> int:
    return sum(host.slots for host in hosts)


def expand_slurm_nodelist(nodelist: str, use_scontrol: bool = True) -> list[str]:
    """Expand a SLURM node list such as `gpu[01-03,07],login1` into host names, in order.

    Uses `scontrol show hostnames` when it is installed (it knows every syntax SLURM accepts); the
    parser below covers the common forms, so a batch script still works where scontrol is not on PATH.
    """
    if use_scontrol and shutil.which("scontrol"):
        try:
            out = subprocess.run(
                ["scontrol", "show", "hostnames", nodelist],
                capture_output=True,
                text=True,
                timeout=10,
                check=True,
            ).stdout
            names = out.split()
            if names:
                return names
        except (OSError, subprocess.SubprocessError):
            pass  # fall back to the parser
    return _expand_nodelist(nodelist)


def _split_top_level(spec: str) -> list[str]:
    """Split on commas that are not inside brackets."""
    parts, depth, current = [], 0, ""
    for char in spec:
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    parts.append(current)
    return [part for part in (p.strip() for p in parts) if part]


def _expand_nodelist(spec: str) -> list[str]:
    names: list[str] = []
    for part in _split_top_level(spec):
        names += _expand_one(part)
    if not names:
        raise LaunchError(f"SLURM node list {spec!r} names no hosts.")
    return names


def _expand_one(pattern: str) -> list[str]:
    match = re.search(r"\[([^\]]*)\]", pattern)
    if not match:
        return [pattern]
    prefix, suffix = pattern[: match.start()], pattern[match.end() :]
    expanded = []
    for item in match.group(1).split(","):
        low, _, high = item.partition("-")
        if not low.isdigit() or (high and not high.isdigit()):
            raise LaunchError(f"cannot read the range {item!r} in SLURM node list {pattern!r}.")
        width = len(low)
        for number in range(int(low), int(high or low) + 1):
            expanded += _expand_one(f"{prefix}{number:0{width}d}{suffix}")
    return expanded
