"""Run every conformance program of this lane in turn, in one launch, and keep what each rank saw.

run.py reference OUT               one process, plain Keras, the global batch and rate
run.py distributed OUT [DEVICES]   kscale: under `kscale run -np 2`, or one process split into DEVICES
                                   devices (logical CPUs for TensorFlow, host devices for JAX)
run.py ... --only NAME[,NAME]      only these programs
run.py ... --from DIR              the programs in DIR (generated ones: tests/conformance/generated)

Each program leaves OUT/NAME.RANK.pkl: its records, final weights, and the error it raised (if any).
One launch runs them all because starting the workers is most of a small program's cost.
"""

from __future__ import annotations

import argparse
import os
import pickle
import sys
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROGRAMS = sorted(p.stem for p in (HERE / "programs").glob("*.py") if not p.stem.startswith("_"))

parser = argparse.ArgumentParser()
parser.add_argument("mode", choices=["reference", "distributed"])
parser.add_argument("out")
parser.add_argument("devices", nargs="?", type=int, default=1)
parser.add_argument("--only", default="")
parser.add_argument("--from", dest="source", default="", help="a folder of programs to run instead")
args = parser.parse_args()
if args.devices > 1:  # JAX reads this when it starts
    os.environ["XLA_FLAGS"] = (
        f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count={args.devices}"
    )

sys.path.insert(0, str(HERE.parents[1]))  # the repo: tests.conformance.*

options: dict = {}
if args.devices > 1:
    if os.environ.get("KERAS_BACKEND") == "jax":
        options = {"backend": "jax"}
    else:
        # As a one-host script starts: TensorFlow imported and its devices set up, then `import kscale`,
        # which makes the MirroredStrategy the process's own (the CPU split in logical devices stands in
        # for a host's GPUs; KSCALE_BACKEND asks for mirrored where there is no GPU).
        import tensorflow as tf

        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration()] * args.devices
        )
        os.environ["KSCALE_BACKEND"] = "mirrored"
        options = {"backend": "mirrored", "devices": [f"CPU:{i}" for i in range(args.devices)]}

import kscale  # noqa: E402
from tests.conformance import compare, harness  # noqa: E402

source = Path(args.source) if args.source else None
available = compare.programs_in(source) if source else PROGRAMS
wanted = [name for name in args.only.split(",") if name] or available
for name in wanted:
    program = compare.program_module(name, source)
    if harness.FAMILY not in program.FAMILIES:
        continue
    directory = Path(args.out) / name
    directory.mkdir(parents=True, exist_ok=True)
    job = harness.Job(reference=args.mode == "reference", directory=str(directory), options=options)
    harness.as_if_just_imported()
    started = time.perf_counter()
    result: dict = {"error": None, "kscale_error": False}
    try:
        model = program.main(job)
        result["weights"] = harness.model_weights(model)
        result["model_class"] = type(model).__qualname__  # the user's class, with its own train_step
    except Exception as err:  # recorded for the test to judge: a KScaleError may be the expected answer
        result["error"] = f"{type(err).__name__}: {err}\n{traceback.format_exc()[-3000:]}"
        result["kscale_error"] = isinstance(err, kscale.KScaleError)
    result["records"] = job.records
    result["initial_weights"] = job.initial_weights
    with open(Path(args.out) / f"{name}.{job.rank}.pkl", "wb") as f:
        pickle.dump(result, f)
    seconds = time.perf_counter() - started  # where a lane's CI time goes, program by program
    verdict = "error" if result["error"] else "done"
    print(f"conformance: {name} rank {job.rank}: {verdict} in {seconds:.1f} s", flush=True)
