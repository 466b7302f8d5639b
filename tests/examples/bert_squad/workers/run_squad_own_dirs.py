"""Runs examples/bert_squad/run_squad.py exactly as `python run_squad.py` would, with --output_dir=BASE/rank<r>.

Usage under horovodrun: `python run_squad_own_dirs.py BASE [run_squad flags...]`. Giving each rank its own
output directory lets the test prove that rank 1 writes nothing into the directory it was handed.
"""

import runpy
import sys
from pathlib import Path

from kscale import environment

SCRIPT = Path(__file__).resolve().parents[4] / "examples" / "bert_squad" / "run_squad.py"

base, flags = sys.argv[1], sys.argv[2:]
sys.argv = [str(SCRIPT), f"--output_dir={base}/rank{environment.current().rank}", *flags]
sys.path.insert(0, str(SCRIPT.parent))
runpy.run_path(str(SCRIPT), run_name="__main__")
