"""Ordinary Keras programs train the same with the one line: each program of programs/, written as keras.io,
Keras' guides and Horovod's examples write them, runs as the one-process reference and under every backend
this lane trains with 2 replicas, launched as users launch it. Every rank is compared: bit-identical
weights and records across ranks; where the program is deterministic, the weights and every record
(evaluate, predict, callback state) equal to one process at the global batch; the same files written.

KNOWN_BROKEN lists what does not work yet, each with the reason (issue 19's item). Those combinations
must still fail: when one is fixed its test fails until it is taken off the list (and the README's "What
works" table, which is this list, is updated).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from tests.conformance import compare, harness

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
RUNNER = "tests/conformance/run.py"
PROGRAMS = sorted(p.stem for p in (REPO / RUNNER).parent.joinpath("programs").glob("[!_]*.py"))

pytestmark = pytest.mark.multiprocess


def _kscale_run(engine: str) -> list[str]:
    return [str(BIN / "kscale"), "run", "--engine", engine, "-np", "2", "--", sys.executable, RUNNER]


#: way of running: (command before its arguments, ranks, arguments after OUT)
WAYS = {
    "horovod": (_kscale_run("horovod"), 2, []),
    "multi_worker": (_kscale_run("tf"), 2, []),
    "mirrored": ([sys.executable, RUNNER], 1, ["2"]),
    "jax": (_kscale_run("jax"), 2, []),
    # one process on two JAX devices (the host's, standing for a host's GPUs): keras.distribution there
    "jax_devices": ([sys.executable, RUNNER], 1, ["2"]),
    "torch": (_kscale_run("torch"), 2, []),
}

#: (family, way, program): why it fails today. Each must still fail (see the module's docstring).
KNOWN_BROKEN: dict[tuple[str, str, str], str] = {}


def lane_ways() -> list[str]:
    if harness.FAMILY == "keras2":
        has_horovod = (BIN / "horovodrun").exists()
        return (["horovod"] if has_horovod else []) + ["multi_worker", "mirrored"]
    return {"keras3-jax": ["jax", "jax_devices"], "keras3-torch": ["torch"]}.get(
        harness.FAMILY, ["mirrored", "multi_worker"]
    )


def _programs_of_this_lane() -> list[str]:
    import importlib

    return [
        name
        for name in PROGRAMS
        if harness.FAMILY in importlib.import_module(f"tests.conformance.programs.{name}").FAMILIES
    ]


#: Seconds one program may take, in a job that runs them all in turn, before the job counts as hung
#: (one takes 2 to 20 s on a quiet 2-core machine): the job's budget grows with its programs.
EACH_PROGRAM = 300
#: Where the module's two launches may run (each program's time, and the workers' start-up).
JOBS_LIMIT = 2 * EACH_PROGRAM * (len(PROGRAMS) + 2)


def cells(names: list[str], ways: list[str], one_way_from: int | None) -> list[tuple[str, str]]:
    """(way, program) pairs to run, grouped by way (one launch each): every pair, or each program under
    one way in turn (--one-way-per-program=K: the j-th program under way (j + K) mod the lane's ways, so
    two lanes of a family with different K run different pairs)."""
    if one_way_from is None:
        return [(way, name) for way in ways for name in names]
    return [
        (way, name)
        for i, way in enumerate(ways)
        for name in names[(i - one_way_from) % len(ways) :: len(ways)]
    ]


def share(names: list[str], config) -> list[str]:
    """This lane's share of the programs (--programs-share=I/N: the i-th of every n)."""
    return shared(names, config.getoption("--programs-share"))


def shared(names: list[str], spec: str) -> list[str]:
    i, n = (int(part) for part in spec.split("/"))
    return names[i::n]


def lane_cells(names: list[str], config) -> list[tuple[str, str]]:
    return cells(share(names, config), lane_ways(), config.getoption("--one-way-per-program"))


def parametrize_cells(metafunc, names: list[str]) -> None:
    """The test's `cell` parameter: this lane's cells, named way-program."""
    if "cell" in metafunc.fixturenames:
        chosen = lane_cells(names, metafunc.config)
        metafunc.parametrize("cell", chosen, ids=[f"{way}-{name}" for way, name in chosen])


def launches(launch_with_progress, tmp_path_factory, cells_of_module, extra: list) -> Callable:
    """`launched(way)`: the way's one launch, every program of its cells in turn as the job's workers, made
    on first use. Timed per program: the job is stopped as hung only when no rank finishes a program for
    EACH_PROGRAM seconds."""
    done: dict[str, tuple[str, Path, int]] = {}

    def launched(way: str) -> tuple[str, Path, int]:
        if way not in done:
            command, ranks, after = WAYS[way]
            names = [name for w, name in cells_of_module if w == way]
            out = tmp_path_factory.mktemp("conformance") / way
            finished = launch_with_progress(
                [*command, "distributed", out, *after, *extra, "--only", ",".join(names)],
                mark="conformance: ",
                each=EACH_PROGRAM,
            )
            assert finished.returncode == 0, finished.stdout[-6000:]
            done[way] = (way, out, ranks)
        return done[way]

    return launched


def pytest_generate_tests(metafunc):
    parametrize_cells(metafunc, _programs_of_this_lane())


@pytest.fixture(scope="module")
def reference(request, launch_with_progress, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("conformance") / "reference"
    names = share(_programs_of_this_lane(), request.config)
    done = launch_with_progress(
        [sys.executable, RUNNER, "reference", out, "--only", ",".join(names)],
        mark="conformance: ",
        each=EACH_PROGRAM,
    )
    assert done.returncode == 0, done.stdout[-6000:]
    return out


@pytest.fixture(scope="module")
def launched(request, launch_with_progress, tmp_path_factory) -> Callable:
    lane = lane_cells(_programs_of_this_lane(), request.config)
    return launches(launch_with_progress, tmp_path_factory, lane, [])


@pytest.fixture
def run(cell, launched) -> tuple[str, Path, int]:
    """The launch of the cell's way (the first cell of a way launches it)."""
    return launched(cell[0])


@pytest.mark.timeout(JOBS_LIMIT)
def test_program_trains_as_in_one_process(cell, reference, run):
    way, out, ranks = run
    program = cell[1]
    broken = KNOWN_BROKEN.get((harness.FAMILY, way, program))
    if broken is None:
        compare.check(program, reference, out, ranks, way)
        return
    with pytest.raises(AssertionError):  # still broken; take it off KNOWN_BROKEN once it works
        compare.check(program, reference, out, ranks, way)


def test_known_broken_names_real_programs_and_ways():
    for family, way, program in KNOWN_BROKEN:
        assert (
            family in ("keras2", "keras3-tf", "keras3-jax", "keras3-torch")
            and way in WAYS
            and program in PROGRAMS
        )


def test_the_readme_table_lists_every_program_once():
    """The documentation's "What works" page (docs/guide/what-works.md, linked from the README) is this
    suite's result: a program added or renamed gets its row."""
    page = (REPO / "docs/guide/what-works.md").read_text()
    table = page.split("# What works: the conformance suite", 1)[1].split("\n\n✓:", 1)[0]
    rows = [line.split("`")[1] for line in table.splitlines() if line.startswith("| `")]
    assert sorted(rows) == PROGRAMS
    assert f"holds {len(PROGRAMS)} Keras programs" in table


def test_one_way_per_program_runs_every_program_once_and_every_way():
    names, ways = [f"p{i}" for i in range(7)], ["horovod", "multi_worker", "mirrored"]
    every_pair = cells(names, ways, None)
    assert sorted(every_pair) == sorted((w, n) for w in ways for n in names)
    for k in range(3):
        spread = cells(names, ways, k)
        assert sorted(n for _, n in spread) == names and {w for w, _ in spread} == set(ways)
        assert [w for w, _ in spread] == sorted((w for w, _ in spread), key=ways.index)  # one launch a way
        assert dict((n, w) for w, n in spread) == {n: ways[(j + k) % 3] for j, n in enumerate(names)}
    # lanes A (K=1) and B (K=0) of tf.keras: each program under two different ways between them
    assert not set(cells(names, ways, 0)) & set(cells(names, ways, 1))
    # ... or, sharing the programs (0/2 and 1/2), every program in one of them, every way in each
    a, b = shared(names, "0/2"), shared(names, "1/2")
    assert sorted(a + b) == names and not set(a) & set(b) and shared(names, "0/1") == names
    assert {w for w, _ in cells(a, ways, 1)} == {w for w, _ in cells(b, ways, 0)} == set(ways)


def test_a_program_is_compared_with_one_process_while_its_loss_scales_agree(tmp_path):
    """Generated seed 437 of lane A (mixed_float16, fit's shuffle): one process's first step overflowed in
    float16 over the global batch and was skipped (its loss scale 2^14 after it), the replicas' halves did
    not (2^15), and the weights parted by 0.14 in every way: the plan's loss-scaling note. Programs in
    mixed_float16 record the scale after every step (`Job.loss_scales`) and are exact while it agrees."""
    import pickle

    (tmp_path / "scaled.py").write_text(
        "FAMILIES = ('keras2', 'keras3-tf', 'keras3-jax', 'keras3-torch')\nEXACT = True\n"
        "EXACT_WHILE_SAME = ('loss_scales',)\n"
    )

    def write(folder: str, weights: float, scales: list) -> None:
        (tmp_path / folder).mkdir(exist_ok=True)
        result = {
            "error": None,
            "kscale_error": False,
            "model_class": "Functional",
            "initial_weights": [],
            "weights": [np.full(2, weights)],
            "records": {"loss_scales": scales},
        }
        (tmp_path / folder / "scaled.0.pkl").write_bytes(pickle.dumps(result))

    write("reference", 1.0, [16384.0, 16384.0])
    write("run", 1.2, [32768.0, 32768.0])
    compare.check("scaled", tmp_path / "reference", tmp_path / "run", 1, "mirrored", tmp_path)
    write("run", 1.2, [16384.0, 16384.0])  # the same steps skipped: the weights must agree
    with pytest.raises(AssertionError, match="weights differ from one process"):
        compare.check("scaled", tmp_path / "reference", tmp_path / "run", 1, "mirrored", tmp_path)
