"""kscale on one GPU (issue 40): Keras 3 on torch, then on JAX, against plain Keras on the same card.

    python benchmarks/gpu_check.py --output benchmarks/results/gpu-check        # on a machine with a GPU
    python benchmarks/gpu_check.py --allow-cpu --quick --output /tmp/gpu-check  # the same code on a CPU

Each backend runs in a process of its own (Keras reads KERAS_BACKEND once), with deterministic kernels
(torch: `use_deterministic_algorithms`, cuBLAS's fixed workspace; JAX: `--xla_gpu_deterministic_ops`):

1. Two models, each in float32 and in `mixed_bfloat16`: MobileNetV2 on 32x32 synthetic images and an MLP
   (1024-4096-4096-10) whose steps take a few milliseconds, where any per-step work kscale added (a host
   sync, a callback reading logs every batch) would show. Plain Keras and `kscale.distribute` in one
   process, the same initial weights, the same data in the same order.
2. Placement: every variable (the model's, the optimizer's, the metrics') on the GPU, and every batch:
   a metric compiled into both models records where `y_true` and `y_pred` are (torch: each step's tensors'
   device; JAX: the sharding of the step's arguments, read when it is traced).
3. Exactness: the weights after a few steps, kscale's against plain Keras', max |difference| and whether
   bit for bit.
4. Speed: steps per second side by side, alternating which goes first, each fit's first epoch left out
   (warm-up); per round the median epoch; the result is the median of the rounds' ratios (kscale / plain)
   and the ratio of the medians.
5. Launches on this one GPU: `kscale run --engine torch -np 2`, torchrun by hand and `kscale run --engine
   jax -np 2` (each must stop within seconds with kscale's error, not NCCL's or a hang); `kscale doctor`
   and `kscale test` for each engine (both must name the GPU and pass).

Writes result.json and result.md to --output; exits 1 if any check failed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # kscale from this checkout, also where it is not installed (a GPU machine)
BACKENDS = ("torch", "jax")
POLICIES = ("float32", "mixed_bfloat16")
MODELS = ("mlp", "mobilenetv2")

#: model -> (per-step batch, steps an epoch, epochs a fit) on a GPU and with --quick.
SIZES = {
    "mlp": {"full": (512, 150, 3), "quick": (32, 6, 3)},
    "mobilenetv2": {"full": (256, 30, 3), "quick": (8, 2, 3)},
}
EXACT_STEPS = 5

#: What the placement metric saw, by the kind of thing ("y_true", "y_pred") -> the platforms seen.
SEEN: dict[str, set[str]] = {}

TINY_TRAINING = """
import kscale, keras, numpy as np
model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(1)])
model.compile(optimizer="sgd", loss="mse")
model = kscale.distribute(model)
model.fit(np.ones((64, 8), "float32"), np.ones((64, 1), "float32"), batch_size=8, epochs=1, verbose=0)
print("TRAINED", flush=True)
"""


# -- one backend, in its own process --------------------------------------------------------------------
def platform_of(value: Any) -> str:
    """'gpu' or 'cpu' for a torch tensor or a JAX array (or sharding)."""
    device = getattr(value, "device", None)
    if hasattr(device, "type"):  # torch
        return "gpu" if device.type == "cuda" else device.type
    devices = value.device_set if hasattr(value, "device_set") else value.devices()
    platforms = {d.platform for d in devices}
    return "gpu" if platforms <= {"gpu", "cuda"} else ",".join(sorted(platforms))


def placement_metric(keras: Any, backend: str) -> Any:
    def record(kind: str, tensor: Any) -> None:
        if backend == "jax":
            import jax

            if not isinstance(tensor, jax.Array):  # Keras' shape inference passes its own placeholders
                return
            jax.debug.inspect_array_sharding(
                tensor, callback=lambda sharding: SEEN.setdefault(kind, set()).add(platform_of(sharding))
            )
        elif tensor.device.type != "meta":  # Keras traces shapes on torch's meta device: not a step
            SEEN.setdefault(kind, set()).add(platform_of(tensor))

    class Placement(keras.metrics.Metric):
        """Records where each step's targets and predictions are; its result is the steps it saw."""

        def __init__(self, name: str = "placement", **kwargs: Any) -> None:
            super().__init__(name=name, **kwargs)
            self.steps = self.add_variable(shape=(), initializer="zeros", name="steps")

        def update_state(self, y_true: Any, y_pred: Any, sample_weight: Any = None) -> None:
            record("y_true", y_true)
            record("y_pred", y_pred)
            self.steps.assign_add(1.0)

        def result(self) -> Any:
            return keras.ops.convert_to_tensor(self.steps)

    return Placement()


def make_deterministic(backend: str) -> None:
    if backend == "torch":
        import torch

        torch.use_deterministic_algorithms(True)
        torch.backends.cudnn.benchmark = False


def synchronize(backend: str, model: Any) -> None:
    """Wait for the device: a wall-clock time must include the work queued before it."""
    if backend == "torch":
        import torch

        if torch.cuda.is_available():
            torch.cuda.synchronize()
    else:
        import jax

        jax.block_until_ready([v.value for v in model.trainable_variables])


def weights_of(model: Any) -> list:
    import numpy as np

    return [np.asarray(w, dtype="float32") for w in model.get_weights()]


def run_backend(
    backend: str,
    quick: bool,
    rounds: int,
    allow_cpu: bool,
    result_path: Path,
    chosen: list[str],
    policies: list[str],
) -> dict:
    import keras
    import numpy as np

    import kscale
    from kscale.bench import models

    make_deterministic(backend)
    on_gpu = _gpu_present(backend)
    if not on_gpu and not allow_cpu:
        raise SystemExit(f"no GPU visible to {backend}: run on a GPU machine, or pass --allow-cpu")
    result: dict = {"backend": backend, "keras": keras.__version__, "device": _device_name(backend)}

    class EpochTimer(keras.callbacks.Callback):
        """Epoch times only: no batch hook, which would make Keras dispatch every step's callbacks."""

        def on_train_begin(self, logs: Any = None) -> None:
            self.times: list[float] = []

        def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
            synchronize(backend, self.model)
            self.start = time.perf_counter()

        def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
            synchronize(backend, self.model)
            self.times.append(time.perf_counter() - self.start)

    cells = []
    for policy in policies:
        keras.config.set_dtype_policy(policy)
        built_in = {"mlp": models.built_in("mlp", gpu=True), "mobilenetv2": models.built_in("cnn", gpu=False)}
        for name, spec in ((n, built_in[n]) for n in chosen):
            batch, steps, epochs = SIZES[name]["quick" if quick else "full"]
            rng = np.random.default_rng(0)
            x, y = spec.data(batch * steps, rng)

            def build(spec: Any = spec) -> Any:
                keras.utils.set_random_seed(1)
                model = spec.build(keras)
                model.compile(**spec.compile_args(keras, 1.0), metrics=[placement_metric(keras, backend)])
                return model

            SEEN.clear()
            plain = build()
            ours = build()
            ours.set_weights(plain.get_weights())
            ours = kscale.distribute(ours, print_plan=False)
            start = weights_of(plain)
            few = slice(0, batch * EXACT_STEPS)
            plain.fit(x[few], y[few], batch_size=batch, epochs=1, shuffle=False, verbose=0)
            ours.fit(x[few], y[few], batch_size=batch, epochs=1, shuffle=False, verbose=0)
            a, b = weights_of(plain), weights_of(ours)
            moved = max(float(np.max(np.abs(w - s))) for w, s in zip(a, start))
            difference = max(float(np.max(np.abs(p - q))) for p, q in zip(a, b))
            bitwise = all(np.array_equal(p, q) for p, q in zip(a, b))
            variables = [
                *ours.variables,
                *ours.optimizer.variables,
                *(v for m in ours.metrics for v in m.variables),
            ]
            placed = sorted({platform_of(v.value) for v in variables})

            plain_rates, our_rates = [], []
            for r in range(rounds):
                for which in ("plain", "ours") if r % 2 == 0 else ("ours", "plain"):
                    model = plain if which == "plain" else ours
                    timer = EpochTimer()
                    model.fit(
                        x, y, batch_size=batch, epochs=epochs, shuffle=False, verbose=0, callbacks=[timer]
                    )
                    rate = steps / statistics.median(timer.times[1:])
                    (plain_rates if which == "plain" else our_rates).append(rate)
            ratios = [o / p for o, p in zip(our_rates, plain_rates)]
            cell = {
                "model": name,
                "description": spec.description if name == "mlp" else "MobileNetV2, 32x32 images, 10 classes",
                "policy": policy,
                "batch": batch,
                "steps_per_epoch": steps,
                "variables_on": placed,
                "batches_on": sorted(SEEN.get("y_true", set())),
                "predictions_on": sorted(SEEN.get("y_pred", set())),
                "exact_steps": EXACT_STEPS,
                "weights_moved": moved,
                "max_abs_difference": difference,
                "bitwise_equal": bitwise,
                "plain_steps_per_s": plain_rates,
                "kscale_steps_per_s": our_rates,
                "median_of_ratios": statistics.median(ratios),
                "ratio_of_medians": statistics.median(our_rates) / statistics.median(plain_rates),
            }
            want = {"gpu"} if on_gpu else {"cpu"}
            cell["placement_ok"] = set(placed) == want and set(cell["batches_on"]) == want
            cell["exact_ok"] = moved > 0 and bitwise
            cells.append(cell)
            result["cells"] = cells
            result_path.write_text(json.dumps(result))  # each cell as it comes: a timeout keeps the rest
            print(json.dumps(cell), flush=True)
    keras.config.set_dtype_policy("float32")
    result["cells"] = cells
    return result


def _gpu_present(backend: str) -> bool:
    if backend == "torch":
        import torch

        return torch.cuda.is_available()
    import jax

    return jax.default_backend() == "gpu"


def _device_name(backend: str) -> str:
    if backend == "torch":
        import torch

        return torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"
    import jax

    return str(jax.devices()[0].device_kind)


# -- the driver ------------------------------------------------------------------------------------------
def child_env(backend: str | None = None, **extra: str) -> dict[str, str]:
    env = {
        **os.environ,
        "PYTHONUNBUFFERED": "1",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    }
    env["CUBLAS_WORKSPACE_CONFIG"] = ":4096:8"
    env["XLA_FLAGS"] = " ".join(filter(None, [env.get("XLA_FLAGS"), "--xla_gpu_deterministic_ops=true"]))
    if backend:
        env["KERAS_BACKEND"] = backend
    env.update(extra)
    return env


def command(name: str, argv: list[str], env: dict[str, str], timeout: float, cwd: str) -> dict:
    """Run one launch and keep what a user would see: exit status, seconds, the output's last lines."""
    start = time.perf_counter()
    try:
        done = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)
        code, output = done.returncode, done.stdout + done.stderr
    except subprocess.TimeoutExpired as err:
        code, output = None, f"{err.stdout or ''}{err.stderr or ''}\nTIMED OUT after {timeout} s"
    seconds = time.perf_counter() - start
    print(f"== {name}: exit {code} in {seconds:.1f} s", flush=True)
    return {"name": name, "argv": argv, "exit": code, "seconds": round(seconds, 1), "tail": output[-3000:]}


def launches(backend: str, gpus: int, workdir: str) -> list[dict]:
    """The launch checks for one engine on this host (`gpus` GPUs visible)."""
    script = Path(workdir, "tiny_training.py")
    script.write_text(TINY_TRAINING)
    py, kscale_cli = sys.executable, [sys.executable, "-m", "kscale.cli"]
    env = child_env(backend)
    found = []
    two = command(
        f"kscale run --engine {backend} -np 2",
        [*kscale_cli, "run", "--engine", backend, "-np", "2", "--", py, str(script)],
        env,
        300,
        workdir,
    )
    if gpus == 1:
        two["ok"] = (
            two["exit"] not in (0, None)
            and "kscale run: error:" in two["tail"]
            and "GPU" in two["tail"]
            and two["seconds"] < 60
        )
    else:
        two["ok"] = two["exit"] == 0 and "TRAINED" in two["tail"]
    found.append(two)
    if backend == "torch":
        raw = command(
            "torchrun --nproc-per-node 2 (by hand)",
            [py, "-m", "torch.distributed.run", "--nproc-per-node", "2", str(script)],
            env,
            300,
            workdir,
        )
        if gpus == 1:
            raw["ok"] = (
                raw["exit"] not in (0, None) and "BackendError" in raw["tail"] and raw["seconds"] < 120
            )
        else:
            raw["ok"] = raw["exit"] == 0 and "TRAINED" in raw["tail"]
        found.append(raw)
    doctor = command(
        f"kscale doctor --engine {backend}", [*kscale_cli, "doctor", "--engine", backend], env, 120, workdir
    )
    doctor["ok"] = doctor["exit"] == 0 and (
        ("GPU" in doctor["tail"] and "visible" in doctor["tail"]) if gpus else True
    )
    found.append(doctor)
    test = command(
        f"kscale test --engine {backend}", [*kscale_cli, "test", "--engine", backend], env, 300, workdir
    )
    test["ok"] = (
        test["exit"] == 0 and "PASS" in test["tail"] and (("cuda" in test["tail"].lower()) if gpus else True)
    )
    found.append(test)
    return found


def report(results: dict) -> str:
    lines = [f"# GPU check, {results['date']}", "", f"Command: `{results['command']}`", ""]
    for backend in results["backends"]:
        lines += [f"## Keras {backend['keras']} on {backend['backend']}: {backend['device']}", ""]
        lines += [
            "| model | policy | batch | variables / batches on | max abs diff after 5 steps (bitwise) | plain steps/s (median) | kscale steps/s (median) | median of ratios | ratio of medians |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for c in backend["cells"]:
            lines.append(
                f"| {c['model']} | {c['policy']} | {c['batch']} | {','.join(c['variables_on'])} / {','.join(c['batches_on'])} "
                f"| {c['max_abs_difference']:.3g} ({'yes' if c['bitwise_equal'] else 'no'}) "
                f"| {statistics.median(c['plain_steps_per_s']):.1f} | {statistics.median(c['kscale_steps_per_s']):.1f} "
                f"| {c['median_of_ratios']:.3f} | {c['ratio_of_medians']:.3f} |"
            )
        lines.append("")
    lines += ["## Launches", "", "| command | exit | seconds | ok |", "|---|---|---|---|"]
    for launch in results["launches"]:
        lines.append(f"| `{launch['name']}` | {launch['exit']} | {launch['seconds']} | {launch['ok']} |")
    return "\n".join(lines) + "\n"


def write(out: Path, results: dict, failures: list[str]) -> None:
    """After each part: a check that runs out of time still leaves what it found."""
    results["failures"] = failures
    (out / "result.json").write_text(json.dumps(results, indent=1))
    (out / "result.md").write_text(report(results))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--output", default=str(REPO / "benchmarks" / "results" / "gpu-check"))
    parser.add_argument("--backends", nargs="+", choices=BACKENDS, default=list(BACKENDS))
    parser.add_argument("--parts", nargs="+", choices=("train", "launch"), default=["train", "launch"])
    parser.add_argument("--models", nargs="+", choices=MODELS, default=list(MODELS))
    parser.add_argument("--policies", nargs="+", choices=POLICIES, default=list(POLICIES))
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument(
        "--timeout", type=float, default=180, help="seconds for each backend's training check"
    )
    parser.add_argument("--quick", action="store_true", help="small sizes (a CPU run of the same code)")
    parser.add_argument("--allow-cpu", action="store_true", help="run without a GPU (to test this script)")
    parser.add_argument("--worker", choices=BACKENDS, help=argparse.SUPPRESS)
    parser.add_argument("--result", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.worker:
        run_backend(
            args.worker,
            args.quick,
            args.rounds,
            args.allow_cpu,
            Path(args.result),
            args.models,
            args.policies,
        )
        return 0

    out = Path(args.output)
    out.mkdir(parents=True, exist_ok=True)
    results: dict = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "command": " ".join(["python", *sys.argv]),
        "backends": [],
        "launches": [],
    }
    failures = []
    from kscale import environment
    from kscale.launch.facts import nvidia_gpus

    results["nvidia_gpus"] = list(nvidia_gpus(environment.current().cuda_visible_devices))
    gpus = len(results["nvidia_gpus"])
    with tempfile.TemporaryDirectory() as workdir:
        for backend in args.backends:
            if "train" in args.parts:
                path = Path(workdir, f"{backend}.json")
                argv_worker = [
                    sys.executable,
                    __file__,
                    "--worker",
                    backend,
                    "--result",
                    str(path),
                    "--rounds",
                    str(args.rounds),
                    "--models",
                    *args.models,
                    "--policies",
                    *args.policies,
                ]
                argv_worker += ["--quick"] * args.quick + ["--allow-cpu"] * args.allow_cpu
                try:
                    code = subprocess.run(
                        argv_worker, env=child_env(backend), cwd=workdir, timeout=args.timeout
                    ).returncode
                except subprocess.TimeoutExpired:
                    code = f"none: stopped after {args.timeout} s"
                if code:
                    failures.append(f"{backend}: the training check exited with status {code}")
                if path.exists():
                    found = json.loads(path.read_text())
                    results["backends"].append(found)
                    for c in found["cells"]:
                        for key in ("placement_ok", "exact_ok"):
                            if not c[key]:
                                failures.append(f"{backend} {c['model']} {c['policy']}: {key} is false")
                write(out, results, failures)
            if "launch" in args.parts:
                for launch in launches(backend, gpus, workdir):
                    results["launches"].append(launch)
                    if not launch["ok"]:
                        failures.append(f"{launch['name']}: exit {launch['exit']}\n{launch['tail'][-1500:]}")
            write(out, results, failures)
    write(out, results, failures)
    print(report(results))
    for failure in failures:
        print("FAILED:", failure)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
