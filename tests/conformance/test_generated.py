"""Generated programs train the same with the one line: a fixed set of seeds of tests/conformance/generated,
composed for this lane, run as the one-process reference and under every way of running of the lane, each
rank compared with one process by the conformance suite's rules (compare.check). `make generated` runs
any number of seeds and reports pass rates per axis value; a failing seed becomes a named program."""

from __future__ import annotations

import sys

import pytest

from tests.conformance import compare, harness
from tests.conformance.generated.compose import compose
from tests.conformance.test_conformance import RUNNER, cells, lane_ways, launches, parametrize_cells, share

pytestmark = pytest.mark.multiprocess

#: The seeds CI runs in every lane (each lane composes its own program of a seed): the three the generator
#: once found wrong (0, 7, 11: fixed, kept as a regression net). Three, not the six of 0-3, 7, 11 before:
#: each seed is a reference run and a launch's program in every lane, and `make test` must end within 60
#: minutes on a 2-core machine (on an AMD EPYC 7002 of 2026-12-01 the lanes' tests took some 12,000 s
#: in all); `make generated SEEDS=...` sweeps any number to find new differences.
CI_SEEDS = (0, 7, 11)
EACH_PROGRAM = 300

#: Cells of CI_SEEDS the generator found wrong and that are not fixed yet: (Keras family, seed, way) -> what
#: differs. Each is expected to fail (strict: a cell that starts passing fails, to be taken off), so a known
#: difference stays visible in every run instead of being left out of the seeds (docs/guide/what-works.md).
KNOWN_WRONG: dict[tuple[str, int, str], str] = {}  # empty today: seeds 0, 7 and 11 were, and are fixed


@pytest.fixture(scope="module")
def programs(request, tmp_path_factory):
    folder = tmp_path_factory.mktemp("generated") / "programs"
    folder.mkdir()
    names = []
    for seed in share(list(CI_SEEDS), request.config):
        program = compose(seed, harness.FAMILY)
        (folder / f"{program.name}.py").write_text(program.source)
        names.append(program.name)
    return folder, names


@pytest.fixture(scope="module")
def reference(programs, launch_with_progress, tmp_path_factory):
    folder, names = programs
    out = tmp_path_factory.mktemp("generated") / "reference"
    done = launch_with_progress(
        [sys.executable, RUNNER, "reference", out, "--from", folder, "--only", ",".join(names)],
        mark="conformance: ",
        each=EACH_PROGRAM,
    )
    assert done.returncode == 0, done.stdout[-6000:]
    return out


def pytest_generate_tests(metafunc):
    parametrize_cells(metafunc, [f"g{seed:04d}" for seed in CI_SEEDS])


@pytest.fixture(scope="module")
def launched(request, programs, launch_with_progress, tmp_path_factory):
    folder, names = programs
    lane = cells(names, lane_ways(), request.config.getoption("--one-way-per-program"))
    return launches(launch_with_progress, tmp_path_factory, lane, ["--from", folder])


@pytest.fixture
def run(cell, launched):
    """The launch of the cell's way (the first cell of a way launches it)."""
    return launched(cell[0])


@pytest.mark.timeout(2 * EACH_PROGRAM * (len(CI_SEEDS) + 2))
def test_generated_program_trains_as_in_one_process(request, cell, programs, reference, run):
    folder, _ = programs
    way, out, ranks = run
    name = cell[1]
    known = KNOWN_WRONG.get((harness.FAMILY, int(name[1:]), way))
    if known:
        request.applymarker(pytest.mark.xfail(reason=known, strict=True))
    compare.check(name, reference, out, ranks, way, folder)
