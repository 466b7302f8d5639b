"""This node's worker processes for the engines without a runner of their own (tf.distribute, JAX).

Horovod has horovodrun; MultiWorkerMirroredStrategy and jax.distributed only read variables
(TF_CONFIG, KERAS_DISTRIBUTION_*), so `kscale run` starts the processes itself, as horovodrun would:
each in its own session (killed with kscale run), output prefixed `[rank]<stdout>:` like horovodrun's,
and the first worker to fail ends the others, its exit status becoming the job's (128 + N for a
signal, the shell's convention), with a message that names the rank, the host and how it ended.
"""

from __future__ import annotations

import dataclasses
import functools
import signal
import socket
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from typing import IO, Any

from kscale.launch import exits
from kscale.launch.exits import describe_exit
from kscale.launch.pernode import signal_groups, start_process, stop_processes

POLL_S = 0.1


@dataclasses.dataclass
class Worker:
    rank: int
    process: Any
    code: int | None = None


def _forward(source: IO[bytes], target: Any, rank: int, stream: str) -> None:
    prefix = f"[{rank}]<{stream}>:"
    for line in iter(source.readline, b""):
        target.write(prefix + line.decode(errors="replace"))
        target.flush()


def run(command: Sequence[str], envs: Mapping[int, Mapping[str, str]], log: Any = None) -> int:
    """Start one process per global rank in `envs`; return 0 when all succeed, else the first failure's status."""
    log = log or sys.stderr
    workers: list[Worker] = []
    interrupted: list[int] = []
    forwarded: list[int] = []
    previous = {}
    # The handler before the first worker starts: a notice while they start (one may print already) is
    # passed on to them, not the end of this process by SIGTERM's default, leaving them without it.
    if threading.current_thread() is threading.main_thread():
        handler = functools.partial(_on_signal, workers, interrupted, forwarded)
        previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    threads: list[threading.Thread] = []
    try:
        for rank, env in envs.items():
            worker = Worker(rank, start_process(command, env))
            with exits.notices_held():
                workers.append(worker)
                if forwarded:  # the notice came while the workers before this one started
                    signal_groups([worker.process], signal.SIGTERM)
            for stream, target, name in (
                (worker.process.stdout, sys.stdout, "stdout"),
                (worker.process.stderr, sys.stderr, "stderr"),
            ):
                threads.append(
                    threading.Thread(target=_forward, args=(stream, target, rank, name), daemon=True)
                )
                threads[-1].start()
        failed = _wait(workers, interrupted)
    finally:
        stop_processes([w.process for w in workers])
        for thread in threads:
            thread.join(timeout=5)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if interrupted:
        print(
            f"kscale run: stopped all workers ({signal.Signals(interrupted[0]).name} received)",
            file=log,
            flush=True,
        )
        return 128 + interrupted[0]
    if failed is None:
        return 0
    code = failed.code if failed.code >= 0 else 128 - failed.code
    print(
        f"kscale run: rank {failed.rank} on {socket.gethostname()} {describe_exit(failed.code)}; stopped the "
        f"other {len(workers) - 1} worker(s) on this host (exit status {code})",
        file=log,
        flush=True,
    )
    return code


def _on_signal(
    workers: list[Worker], interrupted: list[int], forwarded: list, signum: int, frame: Any
) -> None:
    """SIGINT, or a second SIGTERM: stop every worker now. A first SIGTERM is a scheduler's preemption
    notice (Kubernetes sends it to the container's first process, this one): passed on to every worker,
    which stop together after their next backup (kscale/preemption.py) or end as SIGTERM ends them."""
    exits.signals_received.append(signum)
    if signum == signal.SIGTERM and not forwarded:
        forwarded.append(signum)
        signal_groups([worker.process for worker in workers], signal.SIGTERM)
        return
    interrupted.append(signum)


def _wait(workers: list[Worker], interrupted: list[int]) -> Worker | None:
    """Until every worker has finished (None) or one has failed (that one, first by time)."""
    while not interrupted:
        running = False
        for worker in workers:
            if worker.code is None:
                worker.code = worker.process.poll()
                if worker.code is not None and worker.code != 0:
                    return worker
                running = running or worker.code is None
        if not running:
            return None
        time.sleep(POLL_S)
    return None


def free_ports(count: int, address: str = "127.0.0.1") -> list[int]:
    """Ports free right now on `address` (bound together, so they are distinct)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind((address, 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()
