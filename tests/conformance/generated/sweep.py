"""Run generated programs in this lane, under one process and every way of running, and report.

    python -m tests.conformance.generated.sweep --seeds 0-499 --out runs/generated/jax
    python -m tests.conformance.generated.sweep --seeds 7,12 --out /tmp/g --keep   # again, by seed

Writes OUT/programs/gNNNN.py (the programs), OUT/report.json (every seed: its values and, per way, PASS or
what differs) and OUT/report.md (pass rates per lane and way, and per axis value). The lane is this
interpreter's (its venv and KERAS_BACKEND, as `make test` sets them); programs run in chunks, one launch
per chunk and way (starting the workers is most of a small program's cost). Make target: `make generated`.
"""

from __future__ import annotations

import argparse
import collections
import json
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
sys.path.insert(0, str(REPO))

from tests.conformance import compare, harness  # noqa: E402
from tests.conformance.generated import conditioning  # noqa: E402
from tests.conformance.generated.compose import AXES, compose  # noqa: E402
from tests.conformance.test_conformance import RUNNER, WAYS, lane_ways  # noqa: E402

#: The verdict of weights that differ from one process (compare.check's words).
DIFFER = "differ from one process"
#: Seconds a chunk's launch may take per program before it counts as hung (a program takes 1-20 s).
PER_PROGRAM = 120


def seeds_of(text: str) -> list[int]:
    """'0-99,120' -> [0, ..., 99, 120]."""
    seeds: list[int] = []
    for part in text.split(","):
        if "-" in part:
            first, last = part.split("-")
            seeds.extend(range(int(first), int(last) + 1))
        elif part:
            seeds.append(int(part))
    return seeds


def write_programs(seeds: list[int], folder: Path) -> dict[str, dict]:
    """The programs of `seeds` for this lane's family, as files in `folder`; their values by name."""
    folder.mkdir(parents=True, exist_ok=True)
    values = {}
    for seed in seeds:
        program = compose(seed, harness.FAMILY)
        (folder / f"{program.name}.py").write_text(program.source)
        values[program.name] = program.values
    return values


def launch(command: list[str], timeout: float, log: Path) -> int:
    with open(log, "a") as out:
        try:
            return subprocess.run(
                command, cwd=REPO, stdout=out, stderr=subprocess.STDOUT, timeout=timeout
            ).returncode
        except subprocess.TimeoutExpired:
            out.write(f"\nsweep: the launch ran past {timeout:.0f} s and was stopped\n")
            return -1


def run_chunk(names: list[str], source: Path, out: Path, ways: list[str]) -> dict[str, dict[str, str]]:
    """Every program of `names`: the reference, then each way; the verdict per program and way."""
    out.mkdir(parents=True, exist_ok=True)
    only = ["--only", ",".join(names), "--from", str(source.resolve())]
    timeout = PER_PROGRAM * (len(names) + 2)
    launch(
        [sys.executable, RUNNER, "reference", str(out / "reference"), *only], timeout, out / "reference.log"
    )
    verdicts: dict[str, dict[str, str]] = {name: {} for name in names}
    for way in ways:
        command, ranks, after = WAYS[way]
        launch([*command, "distributed", str(out / way), *after, *only], timeout, out / f"{way}.log")
        for name in names:
            try:
                compare.check(name, out / "reference", out / way, ranks, way, source)
                verdicts[name][way] = "PASS"
            except AssertionError as err:
                verdicts[name][way] = f"FAIL {str(err)[:600]}"
            except FileNotFoundError:
                verdicts[name][way] = "FAIL no result (the job stopped before this program)"
    return verdicts


def add_conditioning(verdicts: dict[str, dict[str, str]], out: Path) -> None:
    """Beside each verdict of weights that differ: how far one process moves from itself when its initial
    weights change by rounding (conditioning.py): above the program's tolerance, rounding alone decides."""
    differing = sorted(name for name in verdicts if any(DIFFER in v for v in verdicts[name].values()))
    if not differing:
        return
    found = out / "conditioning.json"
    command = [sys.executable, "-m", "tests.conformance.generated.conditioning", str(out / "programs")]
    launch(
        [*command, ",".join(differing), str(found)], PER_PROGRAM * len(differing), out / "conditioning.log"
    )
    spreads = json.loads(found.read_text()) if found.exists() else {}
    for name in differing:
        spread = spreads.get(name, "not measured (conditioning.log)")
        if isinstance(spread, float):
            tolerance = compare.program_module(name, out / "programs").TOLERANCE
            spread = f"{spread:.3g}" + (" > its tolerance: ill-conditioned" if spread > tolerance else "")
        for way, verdict in verdicts[name].items():
            if DIFFER in verdict:
                verdicts[name][way] = f"{verdict} [one process nudged by {conditioning.NUDGE:g}: {spread}]"


def report(values: dict[str, dict], verdicts: dict[str, dict[str, str]], ways: list[str]) -> str:
    """Pass rates for the lane, per way and per axis value, and the failures."""
    lines = [f"# Generated programs: {harness.FAMILY}", ""]
    cells = [(name, way) for name in verdicts for way in ways]
    passed = sum(verdicts[name][way] == "PASS" for name, way in cells)
    lines.append(f"{len(verdicts)} programs x {len(ways)} ways: {passed} of {len(cells)} cells pass")
    lines.append("")
    for way in ways:
        ok = sum(verdicts[name][way] == "PASS" for name in verdicts)
        lines.append(f"- {way}: {ok} of {len(verdicts)}")
    lines += ["", "| axis | value | programs | cells passed |", "|---|---|---|---|"]
    for axis, choices in AXES.items():
        for value in choices:
            names = [name for name in verdicts if values[name][axis] == value]
            if not names:
                continue
            ok = sum(verdicts[name][way] == "PASS" for name in names for way in ways)
            lines.append(f"| {axis} | {value} | {len(names)} | {ok} of {len(names) * len(ways)} |")
    failures = [(name, way, verdicts[name][way]) for name, way in cells if verdicts[name][way] != "PASS"]
    if failures:
        lines += ["", "## Failures", ""]
        for name, way, verdict in failures:
            summary = ", ".join(f"{a}={values[name][a]}" for a in AXES)
            lines.append(f"- {name} {way}: {verdict.splitlines()[0][:300]}  ({summary})")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seeds", default="0-49")
    parser.add_argument("--out", required=True)
    parser.add_argument("--chunk", type=int, default=40, help="programs per launch")
    parser.add_argument("--ways", default="", help="a comma list (default: every way of this lane)")
    args = parser.parse_args()
    out = Path(args.out)
    ways = [w for w in args.ways.split(",") if w] or lane_ways()
    values = write_programs(seeds_of(args.seeds), out / "programs")
    names = sorted(values)
    verdicts: dict[str, dict[str, str]] = {}
    started = time.time()
    for start in range(0, len(names), args.chunk):
        chunk = names[start : start + args.chunk]
        verdicts.update(run_chunk(chunk, out / "programs", out / f"chunk{start // args.chunk:03d}", ways))
        done = sum(v == "PASS" for name in verdicts for v in verdicts[name].values())
        print(
            f"sweep: {len(verdicts)} of {len(names)} programs run, {done} cells pass "
            f"({time.time() - started:.0f} s)",
            flush=True,
        )
    add_conditioning(verdicts, out)
    (out / "report.json").write_text(
        json.dumps({"family": harness.FAMILY, "ways": ways, "values": values, "verdicts": verdicts}, indent=1)
    )
    (out / "report.md").write_text(report(values, verdicts, ways))
    failed = collections.Counter(way for name in verdicts for way, v in verdicts[name].items() if v != "PASS")
    print((out / "report.md").read_text().split("\n\n| axis")[0])
    return 1 if sum(failed.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
