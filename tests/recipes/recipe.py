"""What the recipe tests share: start a cluster engine's processes ("pods", "tasks") on this machine, each
with the variables that engine gives it, and read the line examples/kubernetes/train.py ends with."""

from __future__ import annotations

import dataclasses
import re
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from tests.conftest import REPO, crash_report

TRAIN = "examples/kubernetes/train.py"
_RESULT = re.compile(
    r"kscale rank (\d+) of (\d+): backend (\w+), loss ([\d.]+), mae ([\d.]+), weights crc32 ([0-9a-f]{8})"
)


@dataclasses.dataclass(frozen=True)
class Result:
    """The last line of examples/kubernetes/train.py in one process."""

    rank: int
    size: int
    backend: str
    loss: float
    mae: float
    crc32: str


def results(output: str) -> list[Result]:
    found = [
        Result(int(r), int(s), b, float(lo), float(m), c) for r, s, b, lo, m, c in _RESULT.findall(output)
    ]
    assert found, crash_report(output)
    return found


def run_processes(processes: Sequence[tuple[Sequence[str], Mapping[str, str]]], timeout: float) -> str:
    """Start every (command, environment) at once from the repository root, as the engine starts its pods
    or tasks, and return their output together; each must exit 0."""
    started = [
        subprocess.Popen(
            list(command),
            env=dict(env),
            cwd=REPO,
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        for command, env in processes
    ]
    outputs = []
    try:
        outputs = [p.communicate(timeout=timeout)[0] for p in started]
    finally:
        for process in started:
            if process.poll() is None:
                process.kill()
                process.wait()
    output = "\n".join(outputs)
    assert [p.returncode for p in started] == [0] * len(started), crash_report(output)
    return output


def assert_one_job(output: str, size: int, backend: str, reference: Result | None = None) -> list[Result]:
    """Every rank of a job of `size` printed its line, with `backend` and the same weights; the job's
    evaluation is one process's at the global batch (`reference`), to the 6 digits printed."""
    found = sorted(results(output), key=lambda r: r.rank)
    assert [(r.rank, r.size, r.backend) for r in found] == [(i, size, backend) for i in range(size)], output[
        -3000:
    ]
    assert len({r.crc32 for r in found}) == 1, f"ranks ended with different weights: {found}"
    if reference is not None:
        assert abs(found[0].loss - reference.loss) <= 2e-6 and abs(found[0].mae - reference.mae) <= 2e-6, (
            found[0],
            reference,
        )
    return found


def one_process(command: Sequence[str], env: Mapping[str, str], replicas: int = 2) -> Result:
    """train.py in one process at the global batch and rate of `replicas` (its defaults: 32 and 0.05 per
    replica): what kscale's job should compute."""
    batch, rate = 32 * replicas, 0.05 * replicas
    output = run_processes([([*command, "--batch-size", str(batch), "--learning-rate", str(rate)], env)], 120)
    (result,) = results(output)
    return result


def manifest_list(path: Path, key: str) -> list[str]:
    """The items of the block list under `key:` in one of our manifests (`command:`), as the test runs
    them: the command a pod runs is read from the manifest itself, so the two cannot drift."""
    lines = path.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == f"{key}:")
    indent = len(lines[start]) - len(lines[start].lstrip())
    items = []
    for line in lines[start + 1 :]:
        stripped = line.strip()
        if not stripped.startswith("- ") or len(line) - len(line.lstrip()) < indent:
            break
        items.append(stripped[2:].split(" #")[0].strip())
    return items


def manifest_env(path: Path) -> dict[str, str]:
    """The `- name: X` / `value: Y` pairs of a manifest's env lists."""
    pairs = re.findall(r"- name: (\w+)\n\s+value: (\S+)", path.read_text())
    return dict(pairs)
