"""`srun`, as far as examples/slurm/train.sbatch uses it (`srun --ntasks-per-node=1 COMMAND...`): one
task per node of the job, each with the variables srun gives a task
(https://slurm.schedmd.com/srun.html#SECTION_OUTPUT-ENVIRONMENT-VARIABLES), all on this machine. It
exits with the first non-zero status of its tasks, as srun does."""

from __future__ import annotations

import os
import subprocess
import sys


def main(argv: list[str]) -> int:
    if not argv or argv[0] != "--ntasks-per-node=1":
        sys.exit(f"fake srun: expected --ntasks-per-node=1 first, got {argv}")
    command = argv[1:]
    nodelist = os.environ["SLURM_JOB_NODELIST"]  # set by sbatch for the batch script
    nodes = nodelist.split(",")
    count = str(len(nodes))
    step = {
        "SLURM_STEP_ID": "0",
        "SLURM_STEP_NODELIST": nodelist,
        "SLURM_STEP_NUM_NODES": count,
        "SLURM_STEP_NUM_TASKS": count,
        "SLURM_STEP_TASKS_PER_NODE": f"1(x{count})",
        "SLURM_NODELIST": nodelist,
        "SLURM_NNODES": count,
        "SLURM_NTASKS": count,
        "SLURM_NPROCS": count,
        "SLURM_TASKS_PER_NODE": f"1(x{count})",
    }
    tasks = [
        subprocess.Popen(
            command,
            env={
                **os.environ,
                **step,
                "SLURM_PROCID": str(node),
                "SLURM_NODEID": str(node),
                "SLURM_LOCALID": "0",
                "SLURMD_NODENAME": name,
            },
        )
        for node, name in enumerate(nodes)
    ]
    codes = [task.wait() for task in tasks]
    return next((code for code in codes if code), 0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
