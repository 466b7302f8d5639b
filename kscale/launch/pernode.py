"""Per-node launch: `kscale run --nnodes M --node-rank R --master ADDR[:PORT] --nproc-per-node K`, no SSH.

Run once on every node (by hand, by a scheduler, or by `srun` - see `from_slurm`). Everything Horovod
already does is reused rather than rewritten:

- node 0 serves the rendezvous with Horovod's own `RendezvousServer` (bound to the port the user named,
  where horovodrun picks a random one), and ranks are assigned by Horovod's `get_host_assignments`;
- each worker gets exactly the environment `horovod.runner.gloo_run` gives it (`create_slot_env_vars`
  and `create_run_env_vars`), and its output is prefixed by Horovod's own `prefix_connection`
  (`[rank]<stdout>:`), as with horovodrun; one failed worker stops the others, as in gloo_run.

What horovodrun gets from SSH - one process that sees every worker's exit - is replaced by a small
control channel on the same rendezvous server (scope `kscale`, JSON values): every node registers,
node 0 publishes the plan, every node reports its state with a heartbeat counter, node 0 publishes the
verdict. So when any worker dies, every node kills its workers and exits non-zero within a few poll
intervals, and a node that vanishes (or a node 0 that vanishes) is noticed after `heartbeat_timeout`.

Why a heartbeat of our own, where horovodrun leans on Horovod and Gloo: Gloo's timeout
(HOROVOD_GLOO_TIMEOUT_SECONDS) ends only a worker blocked in a collective with the dead one, and only
after the timeout; a worker between collectives (loading data, saving a checkpoint, or not started) waits
on. Nothing in Horovod tells one node's launcher that a worker on another node died: horovodrun learns it
through the SSH sessions it owns, which a per-node launch does not have. The channel replaces exactly
that, on Horovod's own rendezvous server; benchmarks/kill_trials.py --mode pernode measures it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import http.client
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, TextIO

from kscale import _horovod_private
from kscale.errors import LaunchError
from kscale.launch.exits import describe_status
from kscale.launch.facts import local_interfaces, resolve_ipv4, source_address_for
from kscale.launch.hosts import expand_slurm_nodelist

DEFAULT_PORT = 29400
SCOPE = "kscale"
POLL_S = 0.25
#: How long node 0 keeps serving after the verdict, waiting for every node to read it.
LINGER_S = 10.0


@dataclasses.dataclass(frozen=True)
class NodeSpec:
    """This node's part in a per-node launch."""

    nnodes: int
    node_rank: int
    master_addr: str
    master_port: int
    nproc_per_node: int
    #: Seconds to wait for every node to register (nodes started by hand start minutes apart).
    start_timeout: float = 120.0
    #: A node (or node 0) silent for this long is declared dead and the job is stopped.
    heartbeat_timeout: float = 30.0
    nics: tuple[str, ...] = ()
    verbose: bool = False

    def __post_init__(self) -> None:
        if self.nnodes < 1:
            raise LaunchError(f"--nnodes {self.nnodes}: expected at least 1 node.")
        if not 0 <= self.node_rank < self.nnodes:
            raise LaunchError(
                f"--node-rank {self.node_rank} with --nnodes {self.nnodes}: node ranks go from 0 to "
                f"{self.nnodes - 1}; give each node its own rank, node 0 on the --master host."
            )
        if self.nproc_per_node < 1:
            raise LaunchError(f"--nproc-per-node {self.nproc_per_node}: expected at least 1 process.")
        if not 0 < self.master_port < 65536:
            raise LaunchError(f"--master port {self.master_port} is not a TCP port (1-65535).")


def parse_master(value: str, default_port: int = DEFAULT_PORT) -> tuple[str, int]:
    """`ADDR` or `ADDR:PORT` (IPv4 address or host name)."""
    host, sep, port = value.rpartition(":")
    if not sep:
        host, port = value, str(default_port)
    if not host or not port.isdigit():
        raise LaunchError(
            f"--master {value!r}: expected ADDR or ADDR:PORT, e.g. --master 10.0.0.1:{default_port}."
        )
    return host, int(port)


def from_slurm(env: Mapping[str, str]) -> tuple[int, int, str, int] | None:
    """(nnodes, node_rank, master host, port) for a `kscale run` started by srun, one task per node.

    Node 0 is the first host of the step's node list; the port is derived from the job id so two jobs
    sharing a node do not collide.
    """
    if "SLURM_NODEID" not in env or not (env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST")):
        return None
    per_node = env.get("SLURM_STEP_TASKS_PER_NODE") or env.get("SLURM_TASKS_PER_NODE") or "1"
    if per_node.split("(")[0].split(",")[0] != "1" or env.get("SLURM_LOCALID", "0") != "0":
        raise LaunchError(
            f"srun started several kscale run per node (tasks per node: {per_node}); kscale run starts "
            "the workers itself. Start one per node: srun --ntasks-per-node=1 kscale run "
            "--nproc-per-node K -- python train.py"
        )
    nodes = expand_slurm_nodelist(env.get("SLURM_STEP_NODELIST") or env["SLURM_JOB_NODELIST"])
    nnodes = int(env.get("SLURM_STEP_NUM_NODES") or env.get("SLURM_NNODES") or len(nodes))
    port = DEFAULT_PORT + int(env.get("SLURM_JOB_ID", "0") or 0) % 1000
    return nnodes, int(env["SLURM_NODEID"]), nodes[0], port


class Unreachable(Exception):
    """The rendezvous server did not answer."""


class ControlClient:
    """JSON values in the `kscale` scope of Horovod's rendezvous key-value store (plain HTTP PUT/GET)."""

    def __init__(self, addr: str, port: int, timeout: float = 5.0) -> None:
        self.addr, self.port, self.timeout = addr, port, timeout

    def _request(self, method: str, key: str, body: bytes | None = None) -> tuple[int, bytes]:
        conn = http.client.HTTPConnection(self.addr, self.port, timeout=self.timeout)
        try:
            headers = {"Content-Length": str(len(body))} if body is not None else {}
            conn.request(method, f"/{SCOPE}/{key}", body=body, headers=headers)
            resp = conn.getresponse()
            return resp.status, resp.read()
        except (OSError, http.client.HTTPException) as err:
            raise Unreachable(f"{self.addr}:{self.port}: {err}") from None
        finally:
            conn.close()

    def put(self, key: str, value: Mapping[str, Any]) -> None:
        status, _ = self._request("PUT", key, json.dumps(value).encode())
        if status != 200:
            raise Unreachable(f"PUT {key} answered {status}")

    def get(self, key: str) -> dict[str, Any] | None:
        status, body = self._request("GET", key)
        if status == 404:
            return None
        if status != 200:
            raise Unreachable(f"GET {key} answered {status}")
        return json.loads(body)


def start_rendezvous(port: int, verbose: bool = False) -> Any:
    """Horovod's RendezvousServer on a fixed port (its `start()` binds a random one)."""
    try:
        return _horovod_private.rendezvous_server_on(port, verbose)
    except OSError as err:
        raise LaunchError(
            f"node 0 cannot serve the rendezvous on port {port}: {err.strerror}. Pick a free port and pass "
            f"the same --master ADDR:PORT to every node."
        ) from None


def stop_rendezvous(server: Any) -> None:
    _horovod_private.close_rendezvous_server(server)


def gloo_interface(spec: NodeSpec, master_ip: str) -> str:
    """The interface Gloo should use on this node: the named one, else the one that reaches node 0."""
    if spec.nics:
        return spec.nics[0]
    interfaces = local_interfaces()
    source = master_ip if any(master_ip in a for a in interfaces.values()) else source_address_for(master_ip)
    for name, addrs in interfaces.items():
        if source in addrs:
            return name
    raise LaunchError(
        f"no local interface reaches node 0 at {master_ip}; check the address and the route "
        f"(ip route get {master_ip}), or name the interface with --network-interfaces."
    )


def worker_env(
    base: Mapping[str, str], slot: Any, master_ip: str, port: int, nics: Sequence[str]
) -> dict[str, str]:
    """A worker's environment: exactly what horovod.runner.gloo_run exports for a Gloo worker."""
    env = dict(base)
    env["PYTHONUNBUFFERED"] = "1"  # gloo_run does the same, or output arrives in bursts
    env.update(_horovod_private.gloo_worker_env(master_ip, nics, port, slot))
    return env


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    """Linux: the worker gets SIGTERM if kscale run itself is killed (even with -9), so none is orphaned."""
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def start_process(command: Sequence[str], env: Mapping[str, str]) -> subprocess.Popen:
    """Start one worker in its own session, so that it and everything it starts can be killed together.

    horovodrun wraps each worker in a `safe_shell_exec` middleman started with multiprocessing's spawn,
    which re-imports the launcher's __main__; for kscale that is the kscale package with TensorFlow, a
    few seconds and a few hundred MB per worker. A plain Popen in a new session does the same job here.
    """
    return subprocess.Popen(
        list(command),
        env=dict(env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
        preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,
    )


def signal_groups(processes: Sequence[subprocess.Popen], signum: int) -> None:
    """Send `signum` to each worker's process group (each runs in a session of its own), gone ones apart."""
    for process in processes:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signum)


def stop_processes(processes: Sequence[subprocess.Popen], grace_s: float = 5.0) -> None:
    """SIGTERM each worker's process group, then SIGKILL what is left after `grace_s` (as safe_shell_exec)."""
    running = [p for p in processes if p.poll() is None]
    signal_groups(running, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    for process in running:
        try:
            process.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()


@dataclasses.dataclass
class _Worker:
    rank: int
    process: subprocess.Popen
    exit_code: int | None = None
    finished_at: float | None = None


class NodeAgent:
    """One node of a per-node launch: rendezvous, local workers, control channel, verdict."""

    def __init__(
        self,
        spec: NodeSpec,
        command: Sequence[str],
        extra_env: Mapping[str, str] | None = None,
        log: TextIO | None = None,
    ) -> None:
        self.spec = spec
        self.command = list(command)
        self.extra_env = dict(extra_env or {})
        self.log_stream = log or sys.stderr
        self.stop = threading.Event()  # set: kill every local worker
        self.changed = threading.Event()  # set: a local worker exited (wake the monitor)
        self.workers: list[_Worker] = []
        self.lock = threading.Lock()
        addresses = resolve_ipv4(spec.master_addr)
        if not addresses:
            raise LaunchError(
                f"--master {spec.master_addr!r} does not resolve to an IPv4 address on this node; use "
                "node 0's IP address or add the name to /etc/hosts."
            )
        self.master_ip = addresses[0]
        self.client = ControlClient(self.master_ip, spec.master_port)
        self.server: Any = None

    def log(self, message: str) -> None:
        print(f"kscale run [node {self.spec.node_rank}/{self.spec.nnodes}]: {message}", file=self.log_stream)
        self.log_stream.flush()

    # -- rendezvous ---------------------------------------------------------------------------------

    def _until(self, deadline: float, what: str, attempt: Any) -> Any:
        last = ""
        while True:
            try:
                result = attempt()
                if result is not None:
                    return result
            except Unreachable as err:
                last = f" (last error: {err})"
            if self.stop.is_set():
                raise LaunchError(f"interrupted while waiting to {what}.")
            if time.monotonic() > deadline:
                raise LaunchError(f"timed out after {self.spec.start_timeout:.0f} s waiting to {what}{last}.")
            time.sleep(POLL_S)

    def rendezvous(self) -> list[Any]:
        """Register with node 0 and return this node's Horovod slots (SlotInfo) from node 0's plan."""
        spec = self.spec
        nonce = secrets.token_hex(8)
        me = {"hostname": socket.gethostname(), "nproc": spec.nproc_per_node, "nonce": nonce}
        deadline = time.monotonic() + spec.start_timeout
        where = f"{spec.master_addr}:{spec.master_port}"
        self._until(
            deadline,
            f"reach node 0's rendezvous at {where} (is kscale run --node-rank 0 running there?)",
            lambda: self.client.put(f"node.{spec.node_rank}", me) or True,
        )
        if spec.node_rank == 0:
            nodes: dict[int, dict] = {}

            def everyone() -> list[dict] | None:
                for rank in range(spec.nnodes):
                    if rank not in nodes:
                        found = self.client.get(f"node.{rank}")
                        if found is not None:
                            nodes[rank] = found
                return [nodes[r] for r in range(spec.nnodes)] if len(nodes) == spec.nnodes else None

            try:
                registered = self._until(deadline, f"hear from all {spec.nnodes} nodes", everyone)
            except LaunchError as err:
                missing = sorted(set(range(spec.nnodes)) - set(nodes))
                raise LaunchError(
                    f"{err} Node ranks {missing} never registered: start kscale run on every node with "
                    f"--master {where} and its own --node-rank."
                ) from None
            names = [n["hostname"] for n in registered]
            labels = [name if names.count(name) == 1 else f"{name}.node{r}" for r, name in enumerate(names)]
            plan = {"labels": labels, "nprocs": [n["nproc"] for n in registered]}
            plan["nonces"] = [n["nonce"] for n in registered]
            slots = _horovod_private.host_assignments(list(zip(labels, plan["nprocs"])), sum(plan["nprocs"]))
            self.server.init(slots)  # Horovod's scopes; this also clears the registrations
            self.client.put("plan", plan)
        else:
            plan = self._until(deadline, "receive the plan from node 0", lambda: self.client.get("plan"))
            slots = _horovod_private.host_assignments(
                list(zip(plan["labels"], plan["nprocs"])), sum(plan["nprocs"])
            )
        if plan["nonces"][spec.node_rank] != nonce:
            raise LaunchError(
                f"another kscale run also registered as --node-rank {spec.node_rank}; give every node a "
                "different rank."
            )
        label = plan["labels"][spec.node_rank]
        return [slot for slot in slots if slot.hostname == label]

    # -- workers ------------------------------------------------------------------------------------

    def start_workers(self, slots: Sequence[Any]) -> None:
        iface = gloo_interface(self.spec, self.master_ip)
        nics = list(self.spec.nics) or [iface]
        base = dict(os.environ)
        base.update(self.extra_env)
        ranks = ", ".join(str(s.rank) for s in slots)
        self.log(f"starting ranks {ranks} of {slots[0].size} (Gloo on {iface}, rendezvous {self.master_ip})")
        for slot in slots:
            env = worker_env(base, slot, self.master_ip, self.spec.master_port, nics)
            worker = _Worker(slot.rank, start_process(self.command, env))
            self.workers.append(worker)
            threading.Thread(target=self._watch, args=(worker,), daemon=True, name=f"rank{slot.rank}").start()
        threading.Thread(target=self._kill_on_stop, daemon=True, name="killer").start()

    def _watch(self, worker: _Worker) -> None:
        """Forward the worker's output with Horovod's `[rank]<stdout>:` prefix; record its exit."""
        streams = [
            (worker.process.stdout, sys.stdout, "stdout"),
            (worker.process.stderr, sys.stderr, "stderr"),
        ]
        forwarders = [
            threading.Thread(
                target=_horovod_private.forward_with_rank_prefix,
                args=(src, dst, name, worker.rank),
                daemon=True,
            )
            for src, dst, name in streams
        ]
        for thread in forwarders:
            thread.start()
        code = worker.process.wait()
        for thread in forwarders:
            thread.join(timeout=5)
        with self.lock:
            # Shell convention, as horovodrun reports it: killed by signal N -> 128 + N.
            worker.exit_code, worker.finished_at = (code if code >= 0 else 128 - code), time.time()
        if worker.exit_code != 0 and not self.stop.is_set():
            self.stop.set()  # as in horovodrun: one failure terminates the other local workers
        self.changed.set()

    def _kill_on_stop(self) -> None:
        self.stop.wait()
        stop_processes([worker.process for worker in self.workers])

    def local_state(self) -> dict[str, Any]:
        with self.lock:
            failed = [w for w in self.workers if w.exit_code not in (None, 0)]
            if failed:
                first = min(failed, key=lambda w: w.finished_at or 0)
                return {
                    "state": "failed",
                    "rank": first.rank,
                    "code": first.exit_code,
                    "at": first.finished_at,
                    "host": socket.gethostname(),
                }
            if all(w.exit_code == 0 for w in self.workers):
                return {"state": "done"}
        return {"state": "running"}

    # -- control channel ----------------------------------------------------------------------------

    def _verdict(self, heard: dict[int, tuple[int, float]]) -> dict[str, Any] | None:
        """Node 0: read every node's status; the first failure seen, a silent node, or all done."""
        now = time.monotonic()
        states, failures = [], []
        for rank in range(self.spec.nnodes):
            status = self.client.get(f"status.{rank}") or {"state": "running", "seq": -1}
            seq, since = heard.get(rank, (None, now))
            if status["seq"] != seq:
                heard[rank] = (status["seq"], now)
            elif now - since > self.spec.heartbeat_timeout and status["state"] != "exited":
                failures.append(
                    {
                        "state": "failed",
                        "code": 1,
                        "node": rank,
                        "lost": True,
                        "at": time.time(),
                        "reason": f"node {rank} sent no heartbeat for {self.spec.heartbeat_timeout:.0f} s "
                        "(its kscale run was killed or its host is down)",
                    }
                )
            if status["state"] == "failed":
                failures.append(
                    {
                        "state": "failed",
                        "code": status["code"],
                        "node": rank,
                        "rank": status["rank"],
                        "at": status.get("at") or time.time(),
                        "reason": status.get("reason")
                        or f"rank {status['rank']} on {status.get('host', 'its host')} (node {rank}) "
                        + describe_status(status["code"]),
                    }
                )
            states.append(status["state"])
        if failures:
            # Two nodes can fail within one poll (a crash and the peer's Gloo error): report the earlier.
            return min(failures, key=lambda f: f["at"])
        if all(state in ("done", "exited") for state in states):
            return {"state": "done", "code": 0}
        return None

    def monitor(self) -> dict[str, Any]:
        """Heartbeat until the job has a verdict; returns it."""
        spec = self.spec
        heard: dict[int, tuple[int, float]] = {}
        seq = 0
        lost_since: float | None = None
        while True:
            self.changed.clear()
            local = self.local_state()
            if self.interrupted is not None and local["state"] != "failed":
                local = {
                    "state": "failed",
                    "rank": -1,
                    "code": 128 + self.interrupted,
                    "at": time.time(),
                    "reason": f"kscale run on node {spec.node_rank} got signal {self.interrupted}",
                }
            seq += 1
            verdict = None
            try:
                self.client.put(f"status.{spec.node_rank}", dict(local, seq=seq))
                if spec.node_rank == 0:
                    verdict = self._verdict(heard)
                    if verdict is not None:
                        self.client.put("job", verdict)
                else:
                    verdict = self.client.get("job")
                lost_since = None
            except Unreachable as err:
                lost_since = lost_since or time.monotonic()
                if time.monotonic() - lost_since > spec.heartbeat_timeout:
                    return {
                        "state": "failed",
                        "code": local.get("code") or 1,
                        "reason": f"lost contact with node 0's rendezvous for {spec.heartbeat_timeout:.0f} s "
                        f"({err})",
                    }
            if verdict is not None:
                return verdict
            self.changed.wait(POLL_S)

    def _wait_for_workers(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                if all(w.exit_code is not None for w in self.workers):
                    return
            self.changed.wait(POLL_S)
            self.changed.clear()

    def _wait_for_acks(self, verdict: Mapping[str, Any]) -> None:
        """Node 0 keeps serving until every node has read the verdict (a lost node never will)."""
        deadline = time.monotonic() + LINGER_S
        pending = set(range(1, self.spec.nnodes)) - ({verdict.get("node")} if verdict.get("lost") else set())
        while pending and time.monotonic() < deadline:
            for rank in list(pending):
                with contextlib.suppress(Unreachable):
                    status = self.client.get(f"status.{rank}")
                    if status and status["state"] == "exited":
                        pending.discard(rank)
            time.sleep(POLL_S)

    # -- the whole run ------------------------------------------------------------------------------

    interrupted: int | None = None

    def run(self) -> int:
        spec = self.spec
        with self._signals():
            if spec.node_rank == 0:
                self.server = start_rendezvous(spec.master_port, spec.verbose)
            try:
                slots = self.rendezvous()
                self.start_workers(slots)
                verdict = self.monitor()
                if verdict["state"] != "done":
                    self.stop.set()
                    self.log(f"stopping local workers: {verdict.get('reason', 'the job failed')}")
                self._wait_for_workers(timeout=30)
                with contextlib.suppress(Unreachable):
                    self.client.put(f"status.{spec.node_rank}", {"state": "exited", "seq": -2})
                if spec.node_rank == 0:
                    self._wait_for_acks(verdict)
            finally:
                self.stop.set()
                if self.server is not None:
                    stop_rendezvous(self.server)
        if verdict["state"] == "done":
            self.log("all workers on all nodes finished")
            return 0
        code = int(verdict.get("code") or 1)
        return code if 0 < code < 256 else 1

    @contextlib.contextmanager
    def _signals(self) -> Iterator[None]:
        """SIGINT/SIGTERM: kill local workers and tell the other nodes (as horovodrun's shutdown event)."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return

        def handler(signum: int, frame: Any) -> None:
            self.interrupted = signum
            self.stop.set()
            self.changed.set()

        previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for sig, old in previous.items():
                signal.signal(sig, old)


def launch(spec: NodeSpec, command: Sequence[str], extra_env: Mapping[str, str] | None = None) -> int:
    """Run this node's part of the job; the exit status is the job's first failure (0 if none)."""
    return NodeAgent(spec, command, extra_env).run()
