"""How far one process's own result moves when its initial weights change by rounding: a failed cell's context.

    python -m tests.conformance.generated.conditioning PROGRAMS_DIR g0238,g0472 OUT.json

A program whose training amplifies rounding (a chaotic one: large targets, a high rate with momentum) ends
apart from itself when its initial weights change by one part in a million, as any other summation order of
the same numbers does: two workers cannot be compared with one process there, and such a cell's failure
says nothing about kscale. The sweep runs this on the programs whose weights differed and writes the
spread beside the verdict; the verdict stays FAIL (the generator should not write such programs: the
regression targets are standardized for this reason).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))

import kscale  # noqa: E402,F401  (as the programs run: after the import)
from tests.conformance import compare, harness  # noqa: E402

#: The relative change of every initial weight: float32 rounding of a sum in another order is of this size.
NUDGE = 1e-6


class NudgedJob(harness.Job):
    """The one-process reference with every initial weight changed by NUDGE (relative, seeded)."""

    def distribute(self, model: Any) -> Any:
        model = super().distribute(model)
        rng = np.random.default_rng(0)
        weights = model.get_weights()
        model.set_weights([w * (1 + NUDGE * rng.standard_normal(w.shape)).astype(w.dtype) for w in weights])
        return model


def spread(program: Any, directory: Path) -> float:
    """The largest relative difference of the final weights between the plain and the nudged run."""
    finals = []
    for label, job_class in (("plain", harness.Job), ("nudged", NudgedJob)):
        folder = directory / label
        folder.mkdir(parents=True, exist_ok=True)
        job = job_class(reference=True, directory=str(folder), options={})
        harness.as_if_just_imported()
        finals.append(harness.model_weights(program.main(job)))
    return compare.max_difference(finals[1], finals[0], relative=True)


def main() -> int:
    source, names, out = Path(sys.argv[1]), sys.argv[2].split(","), Path(sys.argv[3])
    spreads: dict[str, float | str] = {}
    for name in names:
        try:
            spreads[name] = spread(compare.program_module(name, source), out.parent / "conditioning" / name)
        except Exception as err:  # a context for a report: say why there is none
            spreads[name] = f"{type(err).__name__}: {err}"[:200]
    out.write_text(json.dumps(spreads, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
