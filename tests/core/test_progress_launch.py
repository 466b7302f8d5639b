"""The conformance suite's clock: a job of many programs is timed per program, so a slower or busier
machine makes it slower, never red, while a hang still ends it (tests/conftest.py: launch_with_progress)."""

from __future__ import annotations

import sys

import pytest

STEADY = "import time\nfor i in range(4):\n    time.sleep(0.6)\n    print(f'[{i}] program {i}: done', flush=True)\n"
HANGS = "import time\nprint('program 0: done', flush=True)\ntime.sleep(60)\n"


@pytest.mark.timeout(60)
def test_a_job_longer_than_one_budget_goes_on_while_each_step_ends_in_time(launch_with_progress):
    done = launch_with_progress([sys.executable, "-c", STEADY], mark="program ", each=1.5)
    assert done.returncode == 0, done.stdout  # 2.4 s in all, over the 1.5 s each step gets
    assert done.stdout.count(": done") == 4


@pytest.mark.timeout(60)
def test_a_job_that_stops_making_progress_is_stopped_and_says_why(launch_with_progress):
    done = launch_with_progress([sys.executable, "-c", HANGS], mark="program ", each=2)
    assert done.returncode != 0
    assert "program 0: done" in done.stdout and "no line with 'program ' for 2 s" in done.stdout


@pytest.mark.timeout(60)
def test_a_job_is_stopped_at_its_limit_even_while_it_makes_progress(launch_with_progress):
    endless = "import time\nwhile True:\n    print('program: done', flush=True)\n    time.sleep(0.2)\n"
    done = launch_with_progress([sys.executable, "-c", endless], mark="program", each=5, limit=2)
    assert done.returncode != 0 and "running for more than 2 s" in done.stdout
