"""Launching real workers: horovodrun with Gloo, and TF_CONFIG multi-worker processes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from kscale.launch.workers import free_ports

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
HOROVODRUN = BIN / "horovodrun"


def _check(done: subprocess.CompletedProcess, what: str) -> subprocess.CompletedProcess:
    if done.returncode != 0:
        raise AssertionError(f"{what} exited {done.returncode}\n--- output ---\n{done.stdout[-6000:]}")
    return done


@pytest.fixture(scope="session")
def horovodrun(worker_env):
    """Run `args` under `horovodrun -np N -H localhost:N --gloo`; output (stdout+stderr) on failure."""

    def launch(
        np: int, args: list[str], timeout: int = 240, check: bool = True
    ) -> subprocess.CompletedProcess:
        command = [str(HOROVODRUN), "-np", str(np), "-H", f"localhost:{np}", "--gloo", sys.executable, *args]
        done = subprocess.run(
            command,
            env=worker_env(),
            cwd=REPO,
            timeout=timeout,
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        return _check(done, "horovodrun") if check else done

    return launch


@pytest.fixture(scope="session")
def tf_config_workers(worker_env):
    """Run `args` as N processes that form one TF_CONFIG multi-worker cluster on localhost."""

    def launch(
        n: int, args: list[str], timeout: int = 240, check: bool = True
    ) -> list[subprocess.CompletedProcess]:
        workers = [f"localhost:{p}" for p in free_ports(n)]
        procs = []
        for index in range(n):
            config = {"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}}
            procs.append(
                subprocess.Popen(
                    [sys.executable, *args],
                    env=worker_env(TF_CONFIG=json.dumps(config)),
                    cwd=REPO,
                    text=True,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                )
            )
        results = []
        try:
            for proc in procs:
                out, _ = proc.communicate(timeout=timeout)
                results.append(subprocess.CompletedProcess(proc.args, proc.returncode, out))
        finally:
            for proc in procs:
                proc.kill()
        if check:
            for index, done in enumerate(results):
                _check(done, f"TF_CONFIG worker {index}")
        return results

    return launch


@pytest.fixture(scope="session")
def run_python(launch):
    """Run a plain single Python process with the repo importable (tests/conftest.py's `launch`)."""

    def run(
        args: list[str], timeout: int = 240, check: bool = True, **extra_env: str
    ) -> subprocess.CompletedProcess:
        done = launch([sys.executable, *args], timeout=timeout, **extra_env)
        return _check(done, "python") if check else done

    return run


@pytest.fixture(scope="session")
def start_job(worker_env):
    """Start `kscale <args>` in the background (the repo importable, no launcher variables of ours)."""

    def start(args: list[str], output: Any, **extra_env: str) -> subprocess.Popen:
        return subprocess.Popen(
            [str(BIN / "kscale"), *args],
            env=worker_env(**extra_env),
            cwd=REPO,
            stdout=output,
            stderr=subprocess.STDOUT,
        )

    return start
