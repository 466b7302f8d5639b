"""Every use of Horovod beyond its documented API (`horovod.tensorflow[.keras]`, `horovodrun`), in one place.

kscale launches through Horovod's own runner rather than rewriting it: its argument parser, its Gloo
environment, its host assignment, its rendezvous server and its output prefixes. Horovod documents none of
these as API, so each is reached here only, with why; tests/unit/test_horovod_private.py fails loudly if a
Horovod release removes or renames one (0.28.1 is its last release, so that would be a fork or a revival).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import types
from collections.abc import Iterator, Sequence
from typing import Any

from kscale import instance_methods


def parse_horovodrun_args(tokens: Sequence[str]) -> argparse.Namespace:
    """horovodrun's own parser (launch.parse_args reads sys.argv), so every option works as documented."""
    from horovod.runner import launch

    saved = sys.argv
    sys.argv = ["kscale run", *tokens]
    try:
        return launch.parse_args()
    finally:
        sys.argv = saved


def run_horovodrun(args: argparse.Namespace, gloo: bool | None = None, mpi: bool | None = None) -> None:
    """horovodrun with parsed arguments: `launch._run`, what `horovodrun` calls after parsing. `gloo` /
    `mpi`: what kscale's probe already knows of the build, so that the runner does not ask again (each
    answer forks a process that imports TensorFlow); Horovod's own tests patch the same two names."""
    from horovod.runner import launch

    saved = launch.gloo_built, launch.mpi_built
    if gloo is not None and mpi is not None:
        launch.gloo_built = lambda verbose=False: gloo
        launch.mpi_built = lambda verbose=False: mpi
    try:
        with _spawn_without_main():
            launch._run(args)
    finally:
        launch.gloo_built, launch.mpi_built = saved


@contextlib.contextmanager
def _spawn_without_main() -> Iterator[None]:
    """Hide our __main__ from multiprocessing's spawn while Horovod starts workers.

    horovodrun's Gloo mode starts one `safe_shell_exec` middleman per worker with spawn, and spawn
    re-imports the parent's __main__ in each: for horovodrun a small script, for kscale the kscale
    package, which imports TensorFlow (seconds of CPU and hundreds of MB per worker, for nothing).
    """
    main = sys.modules.get("__main__")
    sys.modules["__main__"] = types.ModuleType("__main__")
    try:
        yield
    finally:
        if main is not None:
            sys.modules["__main__"] = main


def host_assignments(hosts: str | Sequence[tuple[str, int]], num_proc: int) -> list[Any]:
    """Horovod's rank placement (SlotInfo per rank) for "host:slots,..." or (host, slots) pairs: the same
    placement horovodrun makes, so kscale's per-node launch and its messages agree with it."""
    from horovod.runner.common.util.hosts import HostInfo, get_host_assignments, parse_hosts

    infos = parse_hosts(hosts) if isinstance(hosts, str) else [HostInfo(name, n) for name, n in hosts]
    return get_host_assignments(infos, num_proc)


def gloo_worker_env(master_ip: str, nics: Sequence[str], port: int, slot: Any) -> dict[str, str]:
    """Exactly the variables horovod.runner.gloo_run exports for a Gloo worker of `slot`."""
    from horovod.runner.gloo_run import create_run_env_vars, create_slot_env_vars

    env = {k: str(v) for k, v in create_run_env_vars(master_ip, list(nics), port).items()}
    env.update(create_slot_env_vars(slot))
    return env


def tuning_env(args: argparse.Namespace) -> dict[str, str]:
    """The variables horovodrun sets from its tuning flags (--fusion-threshold-mb, --timeline-filename, ...)."""
    from horovod.runner.common.util import config_parser

    return config_parser.set_env_from_args({}, args)


def forward_with_rank_prefix(source: Any, target: Any, stream: str, rank: int) -> None:
    """Copy a worker's output with horovodrun's `[rank]<stdout>:` prefix (its safe_shell_exec helper)."""
    from horovod.runner.common.util.safe_shell_exec import prefix_connection

    prefix_connection(source, target, stream, rank, False)


def rendezvous_server_on(port: int, verbose: bool = False) -> Any:
    """Horovod's RendezvousServer serving on a fixed port: its `start()` binds a random one, which nodes
    started separately cannot be told. Sets the two attributes `start()` would; `init()` and `stop()` use
    them as usual. Raises OSError when the port is taken."""
    from horovod.runner.http.http_server import RendezvousHandler, RendezvousHTTPServer, RendezvousServer
    from horovod.runner.util.threads import in_thread

    server = RendezvousServer(verbose)
    httpd = RendezvousHTTPServer(("", port), RendezvousHandler, verbose)
    server._httpd = httpd
    server._listen_thread = in_thread(target=httpd.serve_forever)
    return server


def close_rendezvous_server(server: Any) -> None:
    server.stop()
    server._httpd.server_close()  # stop() shuts the loop down but leaves the socket open


def allreduce_without_autograph(wrapped: Any) -> None:
    """Horovod's DistributedOptimizer averages gradients through `_allreduce_grads`, a `tf.function` with
    AutoGraph on: the first trace converts it and everything it calls (55 of Horovod's functions, about
    3 s of CPU in every worker before its first step) though its only branches on tensors are `tf.cond`
    already; the rest is Python over Python values, which tracing without AutoGraph runs the same way.
    The same function traced without AutoGraph builds the same graph at once."""
    import tensorflow as tf

    python_function = getattr(getattr(wrapped, "_allreduce_grads", None), "python_function", None)
    if python_function is not None:
        wrapped._allreduce_grads = tf.function(python_function, autograph=False)


def weigh_before_allreduce(wrapped: Any, weigh: Any) -> None:
    """Give the gradients Horovod's DistributedOptimizer averages `weigh(gradients)` first: a replica's
    share of a step whose slices differ in size (kscale.step_weights). `_allreduce(grads, vars)` is where
    both of its paths meet (compute_gradients, which minimize calls, and kscale's aggregate_gradients);
    Horovod has no public hook before its average. Bound to the object: Horovod's methods call
    `super(self.__class__, self)`, which a subclass of its class would send back into them without end."""
    cls = type(wrapped)

    def _allreduce(self: Any, grads: Any, variables: Any) -> Any:
        return cls._allreduce(self, weigh(list(grads)), variables)

    instance_methods.bind(wrapped, "_allreduce", _allreduce)


def accumulates_gradients(wrapped: Any) -> bool:
    """Whether Horovod's DistributedOptimizer accumulates gradients over backward passes
    (`backward_passes_per_step` > 1): it then holds an aggregation helper, `_agg_helper`; no public
    attribute says it."""
    return wrapped._agg_helper is not None


def allreduce(wrapped: Any, gradients: list, variables: list) -> list:
    """The gradients averaged by Horovod's DistributedOptimizer's own reduction, `_allreduce` (its
    compression, its rules for local variables, the weighing `weigh_before_allreduce` adds); no public
    method reduces gradients a train_step hands to `apply_gradients` itself."""
    return wrapped._allreduce(gradients, variables)
