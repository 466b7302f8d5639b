"""What the conformance suite asserts of one program under one way of running, against the reference.

Kept apart from the test module so the same checks run on a saved run's output while debugging:
    python -m tests.conformance.compare REFERENCE_DIR RUN_DIR RANKS
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import pickle
import sys
from pathlib import Path
from typing import Any

import numpy as np

from tests.conformance import harness

TOLERANCE = 1e-5
#: What the ranks' records (predict, evaluate: computed by each rank on its own, from bit-identical weights)
#: may differ by: oneDNN's CPU kernels pick code paths by the buffers' alignment, and a prediction of the
#: same rows by the same weights came out 1 ulp apart on two Horovod ranks. The weights must be identical.
RANK_NOISE = 1e-6
#: Records that only the chief holds (what it alone wrote): compared with the reference, not across ranks.
CHIEF_ONLY_PREFIX = "chief_"


def programs_in(source: Path) -> list[str]:
    """The programs of a folder of them (tests/conformance/generated writes such folders)."""
    return sorted(p.stem for p in Path(source).glob("*.py") if not p.stem.startswith("_"))


def program_module(name: str, source: Path | None = None) -> Any:
    """A conformance program: one of tests/conformance/programs, or the file `name`.py in `source`."""
    if source is None:
        return importlib.import_module(f"tests.conformance.programs.{name}")
    key = f"tests.conformance.generated_programs.{name}"
    if key not in sys.modules:
        spec = importlib.util.spec_from_file_location(key, Path(source) / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[key] = module
        spec.loader.exec_module(module)
    return sys.modules[key]


def load(directory: Path, program: str, rank: int) -> dict:
    with open(directory / f"{program}.{rank}.pkl", "rb") as f:
        return pickle.load(f)


def max_difference(a: Any, b: Any, relative: bool = False) -> float:
    """The largest absolute difference between two records of the same structure (inf where they differ);
    `relative`: each difference divided by the size of the second number where that is above 1."""
    if isinstance(a, dict) and isinstance(b, dict):
        if a.keys() != b.keys():
            return float("inf")
        return max([max_difference(a[k], b[k], relative) for k in a] or [0.0])
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return float("inf")
        return max([max_difference(u, v, relative) for u, v in zip(a, b)] or [0.0])
    if isinstance(a, str | bool | type(None)) or isinstance(b, str | bool | type(None)):
        return 0.0 if a == b else float("inf")
    a, b = np.asarray(a, dtype="float64"), np.asarray(b, dtype="float64")
    if a.shape != b.shape:
        return float("inf")
    if not a.size:
        return 0.0
    difference = np.abs(a - b)
    if relative:
        difference = difference / np.maximum(1.0, np.abs(b))
    return float(np.max(difference))


def files_written(directory: Path) -> list[str]:
    """Every file under a program's folder, TensorBoard's event files by folder (their names hold the host
    and the time)."""
    found = []
    for root, _, names in os.walk(directory):
        for name in names:
            relative = os.path.relpath(os.path.join(root, name), directory)
            found.append(os.path.dirname(relative) + "/<events>" if "tfevents" in name else relative)
    return sorted(found)


def check(
    program: str, reference_dir: Path, run_dir: Path, ranks: int, way: str = "", source: Path | None = None
) -> None:
    """Raise AssertionError saying what differs, unless the run trained like the reference (or stopped
    with the KScaleError the program expects of this way of running). `source`: the folder the program
    is in, if not tests/conformance/programs."""
    module = program_module(program, source)
    reference = load(reference_dir, program, 0)
    assert reference["error"] is None, f"the one-process reference failed:\n{reference['error']}"
    results = [load(run_dir, program, rank) for rank in range(ranks)]
    expected_error = getattr(module, "EXPECT_ERROR_WHEN_DISTRIBUTED", None)
    if ranks > 1:
        expected_error = expected_error or getattr(module, "EXPECT_ERROR_WITH_WORKERS", None)
    under = getattr(module, "EXPECT_ERROR_UNDER", {})  # by way, or by "family/way"
    expected_error = expected_error or under.get(f"{harness.FAMILY}/{way}") or under.get(way)
    if expected_error:  # every distributed run trains 2 replicas
        for rank, result in enumerate(results):
            assert result["error"] and result["kscale_error"], (
                f"rank {rank}: expected a KScaleError, got {result}"
            )
            # the class first; its message anywhere (TensorFlow puts "in user code:" before one raised
            # while a step is traced)
            kind, _, message = expected_error.partition(": ")
            assert result["error"].startswith(f"{kind}:") and message in result["error"], (
                f"rank {rank}: {result['error']}"
            )
        return
    for rank, result in enumerate(results):
        assert result["error"] is None, f"rank {rank} failed:\n{result['error']}"
    chief = results[0]
    for rank, result in enumerate(results):  # a plain Keras copy would train with Keras' own train_step
        assert result["model_class"] == reference["model_class"], (
            f"rank {rank} trained a {result['model_class']}, one process a {reference['model_class']}"
        )
    for rank, result in enumerate(results[1:], start=1):
        assert max_difference(result["weights"], chief["weights"]) == 0.0, (
            f"rank {rank}'s weights differ from rank 0's"
        )
        for name, value in result["records"].items():
            if not name.startswith(CHIEF_ONLY_PREFIX):
                assert max_difference(value, chief["records"][name]) <= RANK_NOISE, (
                    f"{name} differs between ranks: rank 0 {chief['records'][name]!r}, rank {rank} {value!r}"
                )
    tolerance = getattr(module, "TOLERANCE", TOLERANCE)
    not_exact = getattr(module, "NOT_EXACT_UNDER", set())  # by way, or by "family/way"
    # Records whose parting is a documented reason for the weights to part too (mixed_float16's dynamic
    # loss scale, harness.Job.loss_scales): exact while they agree with one process's.
    parted = [
        name
        for name in getattr(module, "EXACT_WHILE_SAME", ())
        if max_difference(chief["records"].get(name), reference["records"].get(name)) != 0.0
    ]
    if module.EXACT and not parted and way not in not_exact and f"{harness.FAMILY}/{way}" not in not_exact:
        # Relative to each number's size above 1: float32 carries about 7 digits, so a loss of 5000 summed
        # in another order (another CPU's kernels: an AMD EPYC without AVX-512 here) differs by 5e-4, and an
        # absolute bound of 1e-5 on it would ask for 9 digits (custom_metric_uneven, sum_reduction in C-tf)
        relative = getattr(module, "RELATIVE", True)
        if reference["initial_weights"]:  # empty where the model is built on its first batch
            moved = max_difference(reference["weights"], reference["initial_weights"])
            assert moved > getattr(module, "MOVED_AT_LEAST", 10 * tolerance), (
                f"training moved the weights by {moved:g} only: nothing is compared"
            )
        difference = max_difference(chief["weights"], reference["weights"], relative)
        assert difference < tolerance, (
            f"weights differ from one process at the global batch by {difference:g}"
        )
        # Records a way of running cannot give exactly, each with the reason in the program (and the plan
        # saying so where the program checks it): compared within the program's bound for them.
        inexact_under = getattr(module, "INEXACT_UNDER", {})  # by way, or by "family/way"
        inexact = inexact_under.get(f"{harness.FAMILY}/{way}") or inexact_under.get(way, {})
        for name, value in reference["records"].items():
            difference = max_difference(chief["records"].get(name), value, relative)
            assert difference < inexact.get(name, tolerance), (
                f"{name}: {chief['records'].get(name)!r}, one process at the global batch: {value!r}"
            )
    assert files_written(run_dir / program) == files_written(reference_dir / program), "files written differ"
    for check_records in getattr(module, "CHECKS", ()):
        check_records(chief["records"])


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    reference_dir, run_dir, ranks = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
    way = sys.argv[4] if len(sys.argv) > 4 else ""
    source = Path(sys.argv[5]) if len(sys.argv) > 5 else None
    names = sorted({p.name.split(".")[0] for p in run_dir.glob("*.0.pkl")})
    for name in names:
        try:
            check(name, reference_dir, run_dir, ranks, way, source)
            print(f"PASS {name}")
        except AssertionError as err:
            print(f"FAIL {name}: {str(err)[:1500]}")
