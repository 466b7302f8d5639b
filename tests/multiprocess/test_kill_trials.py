"""A SIGKILLed worker ends the job fast and loses nothing (issue 8.3), under every launcher kscale has.

Runs benchmarks/kill_trials.py (2 trials per launcher, random rank and step, fixed seed) and checks what it
measured: every launcher exits non-zero within the limit after the kill, no worker is left, the output names
the rank, host and signal, and the last checkpoint loads. The 20-trial runs are in benchmarks/RESULTS.md.
"""

from __future__ import annotations

import json

import pytest

LIMIT_S = 60

pytestmark = pytest.mark.multiprocess


@pytest.mark.timeout(600)
@pytest.mark.parametrize("mode", ["horovod", "tf", "pernode", "elastic"])
def test_two_kills_at_random_steps(run_python, tmp_path, mode):
    done = run_python(
        ["benchmarks/kill_trials.py", "--mode", mode, "--trials", "2", "--seed", "8", "--limit", str(LIMIT_S),
         "--output", str(tmp_path)],
        timeout=540, check=False,
    )  # fmt: skip
    with open(tmp_path / f"kill_trials.{mode}.json") as f:
        summary = json.load(f)
    assert summary["trials"] == 2, done.stdout[-3000:]
    for result in summary["results"]:
        where = json.dumps({k: v for k, v in result.items() if k != "output_tail"})
        assert result["killed"], where
        assert all(code != 0 for code in result["exit_codes"]), where
        assert result["seconds_to_exit"] is not None and 0 < result["seconds_to_exit"] <= LIMIT_S, where
        assert result["workers_left"] == [], where
        assert result["names_rank_host_and_signal"], where + result.get("output_tail", "")
        assert result["checkpoint_loads"], where
    assert done.returncode == 0, done.stdout[-3000:]
