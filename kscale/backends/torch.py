"""Keras 3 on PyTorch across processes: one model per process, torch.distributed between them.

The processes find each other as every torch program does: torchrun (or `kscale run --engine torch`, which
hands the job to torchrun), Ray Train's TorchTrainer and Kubeflow set RANK, WORLD_SIZE and MASTER_ADDR /
MASTER_PORT, and kscale joins the process group with them at `import kscale` (gloo on CPU, nccl on CUDA,
each process on its own GPU), or uses the group its launcher already made. Keras 3.15 has no
distribution for torch; each process trains the user's model itself on its shard of the data, as under
Horovod: the chief's weights are broadcast, every optimizer the model trains with applies the mean of the
processes' gradients (one all-reduce per dtype and step, wherever train_step calls `apply`), and
evaluation combines the metrics' states once at the end, exact as one process.

Keras' next release (its development branch, 3.16) brings its own torch data parallelism: whenever
torch.distributed is initialized its trainer wraps the model in DistributedDataParallel and sums every
metric variable over the processes at each read. kscale keeps its own and switches Keras' off for the
models it trains (`_keras_private.keep_torch_data_parallel_off`): DDP averages gradients unweighted, where
kscale weighs a last step the processes share unevenly (one process's sum over the global batch: a
`reduction="sum"` loss was 0.0072 off under DDP), and Keras' sum of metric states is wrong for a state
that is not a sum (a running maximum) and runs a collective at every step. One all-reduce of gradients,
one reduction of metric states, one sharding of the data: kscale's, on either Keras.
"""

from __future__ import annotations

import atexit
import functools
from typing import Any

import keras
import numpy as np
import torch
import torch.distributed as dist

from kscale import _keras_private, _torch_private, step_weights
from kscale.backends.base import Backend
from kscale.callbacks.average_metrics import averaging_class
from kscale.environment import Environment, Launcher
from kscale.errors import BackendError
from kscale.keras3 import loss_scaling
from kscale.keras3.family import Keras3Family, Keras3Options
from kscale.metric_states import assign_shares, reduce_by_aggregation, results_from_states
from kscale.subclassing import same_named_subclass


class TorchBackend(Backend):
    name = "torch"
    Family = Keras3Family
    Options = Keras3Options
    # Each process joins the group and takes its own GPU before Keras creates a variable on the default one.
    create_at_import = True
    # Each process evaluates its own part, of any size, with no collective per step; the metrics' states
    # are combined once at the end (reduce_results).
    uneven_evaluation = True

    def __init__(self, env: Environment, devices: list[str] | None = None):
        super().__init__(env, devices)
        self._ready = False

    @classmethod
    def detect(cls, env: Environment) -> bool:
        if env.launcher is Launcher.TORCH:
            return True
        if env.launcher is Launcher.SLURM and env.world_size > 1:
            return True
        return dist.is_available() and dist.is_initialized()

    def at_import(self) -> None:
        self.setup()

    def setup(self) -> None:
        if self._ready:
            return
        self._ready = True
        if not dist.is_available():
            raise BackendError(
                "this torch was built without torch.distributed, which kscale needs for several processes. "
                "Install a torch build from pytorch.org (the CPU one: pip install torch --index-url "
                "https://download.pytorch.org/whl/cpu)."
            )
        cuda = torch.cuda.is_available()
        if cuda and self.env.world_size > 1 and not dist.is_initialized():
            _check_one_gpu_each(
                self.env.local_size,
                tuple(torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())),
            )
        if cuda:  # before Keras creates any variable on "cuda", which means the current device
            torch.cuda.set_device(self.env.local_rank % torch.cuda.device_count())
        # The group is left and freed before the interpreter tears torch down, whoever made it: a gloo
        # group still alive at exit can abort the process ("terminate called without an active
        # exception"), failing a job that trained well. A launcher that leaves it itself (Ray) is first.
        atexit.register(_leave_process_group)
        if dist.is_initialized() or self.env.world_size < 2:
            return  # Ray Train's TorchTrainer made the group already; or one process
        if self.env.torch_master is None:
            raise BackendError(
                f"{self.env.launcher.value} started this process as worker {self.env.rank} of "
                f"{self.env.world_size}, but MASTER_ADDR and MASTER_PORT are not set, so the workers cannot "
                "meet. Start the job with torchrun (or `kscale run --engine torch`), or export MASTER_ADDR "
                "(the first node's host name) and MASTER_PORT (a free port) in the job script."
            )
        dist.init_process_group(
            backend="nccl" if cuda else "gloo", rank=self.env.rank, world_size=self.env.world_size
        )

    @property
    def num_workers(self) -> int:
        self.setup()
        return dist.get_world_size() if dist.is_initialized() else 1

    @property
    def worker_index(self) -> int:
        self.setup()
        return dist.get_rank() if dist.is_initialized() else 0

    @property
    def devices(self) -> tuple[str, ...]:
        return (str(_device()),)

    # -- the model ------------------------------------------------------------------------------------------
    def place_model(self, model: Any) -> Any:
        """The user's model itself, with the chief's weights (and optimizer state, if it has any yet)."""
        _check_on_this_processes_gpu(model)
        if self.num_workers > 1:
            _keras_private.keep_torch_data_parallel_off(model)
            optimizer_variables = list(getattr(model.optimizer, "variables", None) or [])
            self._broadcast([*model.variables, *optimizer_variables])
        return model

    def optimizer_for(self, optimizer: Any, options: Any) -> Any:
        prepared = super().optimizer_for(optimizer, options)
        if self.num_workers > 1:
            # mixed_float16: each process's float16 backward pass carries one process's numbers, also on
            # a last step shared unevenly (a process of fewer samples would overflow where one does not)
            loss_scaling.as_one_process(prepared)
            prepared.__class__ = _averaging_class(type(prepared), self._mean_of_gradients)
        return prepared

    def _broadcast(self, variables: list) -> None:
        tensors = [v.value for v in variables]
        with torch.no_grad():
            for group in _by_dtype(tensors):
                flat = torch.cat([t.reshape(-1) for t in group])
                dist.broadcast(flat, src=0)
                for tensor, part in zip(group, _split_like(flat, group)):
                    tensor.copy_(part)

    def _mean_of_gradients(self, gradients: list) -> list:
        """The processes' mean of each gradient: one all-reduce per dtype (None stays None everywhere)."""
        present = [g for g in gradients if g is not None]
        means: dict[int, torch.Tensor] = {}
        for group in _by_dtype(present):
            flat = torch.cat([g.reshape(-1) for g in group])
            dist.all_reduce(flat, op=dist.ReduceOp.SUM)
            flat /= dist.get_world_size()
            means.update((id(g), part) for g, part in zip(group, _split_like(flat, group)))
        return [None if g is None else means[id(g)] for g in gradients]

    # -- callbacks and results ---------------------------------------------------------------------------
    def own_callbacks(self, declared_states: bool = False) -> list:
        if self.num_workers == 1:
            return []
        return [averaging_class(keras.callbacks.Callback)(self.average, self.reduce_results)]

    def reduce_results(self, model: Any, logs: dict) -> dict:
        """Every metric's state combined over processes as its aggregation says (sums of totals and counts,
        true positives...; a mean or the first process's where a state says so), and the results computed
        from them: what one process evaluating all the data reports."""
        return self._results(model, logs, keep_states=False)

    def reduce_evaluation(self, model: Any, logs: dict) -> dict:
        return self._results(model, logs, keep_states=True)

    def _results(self, model: Any, logs: dict, keep_states: bool) -> dict:
        if self.num_workers == 1:
            return logs
        return results_from_states(
            model, logs, self.combined_metric_states, self.average, keras.ops.convert_to_numpy, keep_states
        )

    def combined_metric_states(self, variables: list, reductions: list[str]) -> list[np.ndarray]:
        rows = self._gather_arrays([np.asarray(v.numpy()) for v in variables])
        return reduce_by_aggregation(variables, rows, reductions)

    def restore_metric_states(self, variables: list, values: list[np.ndarray], reductions: list[str]) -> None:
        """Each process its share (metric_states.share_of), the chief's holding the combined states."""
        assign_shares(variables, values, reductions, self.is_chief)

    def _gather_arrays(self, arrays: list[np.ndarray]) -> list[np.ndarray]:
        """Every process's `arrays` (the same shapes everywhere), each as one row per process."""
        if not arrays:
            return []
        lengths = [a.size for a in arrays]
        flat = np.concatenate([a.reshape(-1).astype(np.float64) for a in arrays])
        rows = self._all_gather(flat)
        out = []
        for array, columns in zip(arrays, np.split(rows, np.cumsum(lengths)[:-1], axis=1)):
            out.append(columns.reshape((rows.shape[0], *array.shape)).astype(array.dtype))
        return out

    def _all_gather(self, values: np.ndarray) -> np.ndarray:
        local = torch.as_tensor(values).to(_device())
        rows = [torch.empty_like(local) for _ in range(self.num_workers)]
        dist.all_gather(rows, local)
        return np.stack([row.cpu().numpy() for row in rows])

    def broadcast(self, array: np.ndarray) -> np.ndarray:
        if self.num_workers == 1:
            return np.asarray(array)
        tensor = torch.as_tensor(np.ascontiguousarray(array)).to(_device())
        dist.broadcast(tensor, src=0)
        return tensor.cpu().numpy()

    def gather(self, values: np.ndarray) -> np.ndarray:
        if self.num_workers == 1:
            return np.asarray(values, np.float32)[None]
        return self._all_gather(np.asarray(values, np.float32))

    def mean_over_workers(self, values: np.ndarray) -> np.ndarray:
        if self.num_workers == 1:
            return values
        tensor = torch.as_tensor(np.asarray(values, np.float64)).to(_device())
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
        return (tensor / self.num_workers).cpu().numpy().astype(values.dtype)

    def average(self, values: list[float]) -> list[float]:
        if self.num_workers == 1 or not values:
            return list(values)
        return [float(v) for v in self.mean_over_workers(np.asarray(values, np.float64))]

    def barrier(self) -> None:
        if self.num_workers > 1:
            dist.barrier()


def _check_one_gpu_each(processes_here: int, gpus: tuple[str, ...]) -> None:
    """NCCL, which kscale joins on CUDA, refuses two processes on one GPU only at the first collective,
    with its own error ("Duplicate GPU detected"); a launcher that bypassed `kscale run`'s check (torchrun
    by hand, a job script) is stopped here instead, before the group is made, by the same rule. Imported
    here: kscale.launch loads the launcher, which no worker needs unless it has CUDA and peers."""
    from kscale.launch import checks

    problem = checks.shared_gpu_problem("torch", processes_here, gpus)
    if problem is not None:
        what, fix = problem
        raise BackendError(f"{what} Fix: {fix}.")


def _check_on_this_processes_gpu(model: Any) -> None:
    """A model built before `import kscale` chose this process's GPU lives on the default one: every process
    of the host would train on GPU 0. Stop with the fix instead."""
    if not torch.cuda.is_available():
        return
    mine = torch.cuda.current_device()
    elsewhere = {v.value.device.index for v in model.variables if v.value.is_cuda} - {mine}
    if elsewhere:
        raise BackendError(
            f"the model's variables are on cuda:{min(elsewhere)}, but this process trains on cuda:{mine} (one "
            "GPU per process): the model was built before `import kscale` gave this process its GPU. Put "
            "`import kscale` at the top of the script, before building the model."
        )


def _leave_process_group() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()
    _torch_private.release_destroyed_groups()  # freed now, their threads joined, not in the teardown


def _device() -> torch.device:
    """Where this process's tensors live (nccl moves CUDA tensors only; gloo takes CPU ones)."""
    return (
        torch.device("cuda", torch.cuda.current_device())
        if torch.cuda.is_available()
        else torch.device("cpu")
    )


def _by_dtype(tensors: list) -> list[list]:
    groups: dict[Any, list] = {}
    for tensor in tensors:
        groups.setdefault((tensor.dtype, tensor.device), []).append(tensor)
    return list(groups.values())


def _split_like(flat: torch.Tensor, group: list) -> list[torch.Tensor]:
    parts = torch.split(flat, [t.numel() for t in group])
    return [part.view_as(t) for part, t in zip(parts, group)]


@functools.cache
def _averaging_class(base: type, mean: Any) -> type:
    """`base` whose `apply` (every path to an update: Keras' train_step, apply_gradients, a train_step of
    one's own) takes the processes' mean of the gradients. Named and placed like the original, so that
    saved files name the user's optimizer class."""

    def apply(self: Any, grads: Any, trainable_variables: Any = None) -> Any:
        with torch.no_grad():
            averaged = mean(step_weights.scale(list(grads)))  # weighted by a shared last step's share
        return base.apply(self, averaged, trainable_variables)

    return same_named_subclass(base, {"apply": apply})
