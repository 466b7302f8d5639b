"""What `kscale bench` plans from its options, and the errors it gives before launching anything."""

from __future__ import annotations

import pytest

from kscale.bench import runner, suite
from kscale.cli.bench import bench_command_parser, plan_from
from kscale.errors import KScaleError


def _plan(*argv: str, gpus: int = 0):
    return plan_from(bench_command_parser().parse_args(list(argv)), gpus)


def test_quick_full_gpu_and_user_model_plans(tmp_path):
    quick = _plan("--quick", "--backends", "single", "horovod")
    assert (quick.models, quick.workers, quick.repeats, quick.knobs) == (
        ("mlp",),
        (1, 2),
        1,
        ("fp16 compression",),
    )
    assert quick.input_sharding and quick.baselines and not quick.separate_baselines
    launched = [[(s.impl, s.variant) for s in group] for group in suite.settings(quick)]
    assert [("horovod", "") not in group for group in launched] == [True] * len(launched)
    assert [("kscale", "in turn")] in launched  # kscale and Horovod's script in one job instead
    full = _plan("--backends", "single")
    assert full.models == ("mlp", "lstm", "cnn", "bert") and full.repeats == 2 and full.knobs == ()
    assert _plan("--backends", "single", gpus=4).workers == (1, 2, 3, 4)
    assert _plan("--backends", "single", "--workers", "4").workers == (1, 4)  # efficiency needs one worker
    assert _plan("--backends", "single", "--knobs").knobs == suite.KNOB_LABELS  # no value: every knob
    assert "agreement check off" in suite.KNOB_LABELS
    model = tmp_path / "model.py"
    model.write_text("def build():\n    pass\n")
    user = _plan("--model", f"{model}:build", "--backends", "single")
    assert user.batch_sizes == (16, 32, 64) and not user.baselines and user.knobs == ("fp16 compression",)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (("--models", "resnet"), "unknown benchmark model 'resnet'"),
        (("--model", "missing.py:build"), "no such file missing.py"),
        (("--model", "model.py"), "unknown benchmark model 'model.py'.*path/to/model.py:build"),
        (("--knobs", "turbo"), "unknown knob"),
    ],
)
def test_bad_options_are_refused_before_any_launch(argv, message):
    with pytest.raises(KScaleError, match=message):
        _plan(*argv, "--backends", "single")
    assert issubclass(runner.BenchError, KScaleError)
