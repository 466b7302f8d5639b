"""run_squad.py and optimization.py: SQuAD pre- and post-processing, the optimizer, and real runs.

The real runs use `--tiny_config` (a 2-layer, 32-wide random BERT) on the shipped mini SQuAD files, so the
whole file takes about two minutes on two CPU cores. `conftest.py` puts the example folder on
sys.path, so its modules import as the scripts import each other.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import optimization
import pytest
import run_squad
import tensorflow as tf
import tokenization

from kscale import environment

EXAMPLE_DIR = Path(run_squad.__file__).resolve().parent
TRAIN_FILE = EXAMPLE_DIR / "data" / "train-v1.1-mini.json"
DEV_FILE = EXAMPLE_DIR / "data" / "dev-v1.1-mini.json"
WORKERS = Path(__file__).parent / "workers"
BATCH, EPOCHS = 8, 2


@pytest.fixture(scope="module")
def vocab_file(minilm_dir: Path) -> str:
    return str(minilm_dir / "vocab.txt")


@pytest.fixture(scope="module")
def tokenizer(vocab_file: str) -> tokenization.FullTokenizer:
    return tokenization.FullTokenizer(vocab_file, do_lower_case=True)


def tiny_flags(vocab_file: str) -> list[str]:
    return [
        "--tiny_config",
        f"--vocab_file={vocab_file}",
        "--max_seq_length=192",
        f"--train_batch_size={BATCH}",
        "--predict_batch_size=16",
        "--save_checkpoints_steps=1000",
    ]


def run(command: list[str], timeout: float) -> subprocess.CompletedProcess:
    """Run a command with a clean launcher environment; fail the test with its output if it fails."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith((*environment.LAUNCHER_VARIABLE_PREFIXES, "KSCALE_"))
    }
    bin_dir = Path(sys.executable).parent
    env.update(
        PATH=f"{bin_dir}{os.pathsep}{env.get('PATH', '')}", TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1"
    )
    try:
        proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as err:
        pytest.fail(f"{command[:6]} ran over {timeout}s:\n{(err.stderr or b'')[-4000:]!r}")
    if proc.returncode != 0:
        pytest.fail(f"{command} exited {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}")
    return proc


def horovodrun(script: Path, *args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    bin_dir = Path(sys.executable).parent
    launcher = [str(bin_dir / "horovodrun"), "-np", "2", "-H", "localhost:2", "--gloo"]
    return run([*launcher, sys.executable, str(script), *args], timeout)


def single_process_steps() -> int:
    """The step count of one process: int(questions / batch * epochs), as google-research/bert counts."""
    data = json.loads(TRAIN_FILE.read_text())["data"]
    questions = sum(len(p["qas"]) for article in data for p in article["paragraphs"])
    return int(questions / BATCH * EPOCHS)


def checkpoint_step(model_dir: Path) -> int:
    return int(tf.train.load_variable(tf.train.latest_checkpoint(str(model_dir)), "global_step"))


# --------------------------------------------------------------------------------------------------------
# Reading and feature conversion
# --------------------------------------------------------------------------------------------------------


def test_split_context_maps_every_character_to_its_word():
    words, offsets = run_squad.split_context("Denver  Broncos\twon\u202f50")
    assert words == ["Denver", "Broncos", "won", "50"]
    assert offsets[0] == 0 and offsets[7] == 0 and offsets[8] == 1 and offsets[-1] == 3


def test_doc_spans_cover_the_document_and_max_context_picks_the_centred_window():
    spans = run_squad.doc_spans(num_tokens=10, max_tokens_for_doc=4, doc_stride=2)
    assert [tuple(s) for s in spans] == [(0, 4), (2, 4), (4, 4), (6, 4)]
    # Token 3 is in windows 0 (at its right edge) and 1 (one from the left, two from the right).
    assert run_squad.check_is_max_context(spans, 1, 3)
    assert not run_squad.check_is_max_context(spans, 0, 3)


def test_training_examples_hold_their_answer():
    examples = run_squad.read_squad_examples(str(TRAIN_FILE), is_training=True, version_2_with_negative=False)
    assert len(examples) == 60
    for ex in examples:
        span = " ".join(ex.doc_tokens[ex.start_position : ex.end_position + 1])
        assert " ".join(ex.orig_answer_text.split()) in span


def test_features_point_at_the_answer_in_every_window(tokenizer):
    examples = run_squad.read_squad_examples(str(TRAIN_FILE), is_training=True, version_2_with_negative=False)
    features = []
    run_squad.convert_examples_to_features(examples, tokenizer, 64, 16, 20, True, features.append)
    assert len(features) > 2 * len(examples)  # 64 tokens forces several windows per paragraph
    inside = 0
    for f in features:
        assert len(f.input_ids) == len(f.input_mask) == len(f.segment_ids) == 64
        if f.start_position == 0:
            assert f.end_position == 0  # the answer is not in this window
            continue
        inside += 1
        predicted = " ".join(f.tokens[f.start_position : f.end_position + 1]).replace(" ##", "")
        answer = " ".join(tokenizer.tokenize(examples[f.example_index].orig_answer_text)).replace(" ##", "")
        assert predicted == answer
    assert inside >= len(examples)  # every answer is inside at least one window


def test_v2_impossible_questions_train_on_cls(tmp_path, tokenizer):
    squad = {
        "version": "v2.0",
        "data": [
            {
                "paragraphs": [
                    {
                        "context": "The Broncos won Super Bowl 50.",
                        "qas": [
                            {
                                "id": "a",
                                "question": "Who won?",
                                "answers": [{"text": "Broncos", "answer_start": 4}],
                            },
                            {"id": "b", "question": "Who lost?", "answers": [], "is_impossible": True},
                        ],
                    }
                ]
            }
        ],
    }
    path = tmp_path / "v2.json"
    path.write_text(json.dumps(squad))
    examples = run_squad.read_squad_examples(str(path), is_training=True, version_2_with_negative=True)
    assert [(e.is_impossible, e.start_position) for e in examples] == [(False, 1), (True, -1)]
    features = []
    run_squad.convert_examples_to_features(examples, tokenizer, 32, 16, 16, True, features.append)
    assert features[0].tokens[features[0].start_position] == "broncos"
    assert (features[1].start_position, features[1].end_position, features[1].is_impossible) == (0, 0, True)


# --------------------------------------------------------------------------------------------------------
# Answers from logits
# --------------------------------------------------------------------------------------------------------


def one_example(tokenizer):
    example = run_squad.SquadExample(
        "q1", "Who won Super Bowl 50?", run_squad.split_context("The Denver Broncos won.")[0]
    )
    features = []
    run_squad.convert_examples_to_features([example], tokenizer, 32, 16, 16, False, features.append)
    (feature,) = features
    return example, feature


def logits_for(feature, start_token, end_token, null=0.0):
    start, end = [-10.0] * len(feature.input_ids), [-10.0] * len(feature.input_ids)
    start[feature.tokens.index(start_token)] = 5.0
    end[feature.tokens.index(end_token)] = 5.0
    start[0] = end[0] = null
    return run_squad.RawResult(feature.unique_id, start, end)


def test_write_predictions_v1_returns_original_text_and_nbest(tmp_path, tokenizer):
    example, feature = one_example(tokenizer)
    result = logits_for(feature, "denver", "broncos")
    files = [str(tmp_path / n) for n in ("predictions.json", "nbest.json", "null_odds.json")]
    predictions = run_squad.write_predictions([example], [feature], [result], 5, 30, True, *files)
    assert predictions == {"q1": "Denver Broncos"}  # original casing, from the context
    assert json.loads((tmp_path / "predictions.json").read_text()) == predictions
    nbest = json.loads((tmp_path / "nbest.json").read_text())["q1"]
    assert nbest[0]["text"] == "Denver Broncos" and nbest[0]["start_logit"] == 5.0
    assert abs(sum(e["probability"] for e in nbest) - 1.0) < 1e-6
    assert len({e["text"] for e in nbest}) == len(nbest) <= 5
    assert not (tmp_path / "null_odds.json").exists()


def test_write_predictions_v2_uses_the_null_threshold(tmp_path, tokenizer):
    example, feature = one_example(tokenizer)
    result = logits_for(feature, "denver", "broncos", null=6.0)  # null 12 vs best span 10
    files = [str(tmp_path / n) for n in ("p.json", "n.json", "null_odds.json")]
    assert run_squad.write_predictions([example], [feature], [result], 5, 30, True, *files, True, 0.0) == {
        "q1": ""
    }
    assert json.loads((tmp_path / "null_odds.json").read_text()) == {"q1": pytest.approx(2.0)}
    predictions = run_squad.write_predictions([example], [feature], [result], 5, 30, True, *files, True, 3.0)
    assert predictions == {"q1": "Denver Broncos"}


def test_max_answer_length_drops_long_spans(tmp_path, tokenizer):
    example, feature = one_example(tokenizer)
    result = logits_for(feature, "the", "won")  # a 4-token span
    files = [str(tmp_path / n) for n in ("p.json", "n.json", "o.json")]
    predictions = run_squad.write_predictions([example], [feature], [result], 5, 2, True, *files)
    assert len(predictions["q1"].split()) <= 2


def test_get_final_text_restores_case_and_drops_what_the_tokenizer_split_off():
    assert run_squad.get_final_text("steve smith", "Steve Smith's", True) == "Steve Smith"
    assert run_squad.get_final_text("1895", "(1895-1943).", True) == "1895"
    assert run_squad.get_final_text("nowhere", "Steve Smith's", True) == "Steve Smith's"


# --------------------------------------------------------------------------------------------------------
# optimization.py
# --------------------------------------------------------------------------------------------------------


def test_learning_rate_warms_up_then_decays_linearly_to_zero():
    with tf.Graph().as_default():
        step = tf.compat.v1.placeholder(tf.int64, [])
        lr = optimization.learning_rate_schedule(step, peak_lr=1.0, num_train_steps=100, num_warmup_steps=10)
        with tf.compat.v1.Session() as sess:
            values = [sess.run(lr, {step: s}) for s in (0, 5, 10, 55, 100)]
    np.testing.assert_allclose(values, [0.0, 0.5, 0.9, 0.45, 0.0], atol=1e-6)


def test_adamw_decays_weights_but_not_layer_norm_or_bias():
    with tf.Graph().as_default():
        kernel = tf.compat.v1.get_variable("dense/kernel", initializer=tf.constant([2.0]))
        bias = tf.compat.v1.get_variable("dense/bias", initializer=tf.constant([2.0]))
        gamma = tf.compat.v1.get_variable("LayerNorm/gamma", initializer=tf.constant([2.0]))
        step = tf.compat.v1.train.get_or_create_global_step()
        opt = optimization.AdamWeightDecayOptimizer(
            0.1, weight_decay_rate=0.5, exclude_from_weight_decay=optimization.NO_DECAY
        )
        zero = tf.constant([0.0])  # no gradient signal: only the decoupled decay moves a weight
        train = opt.apply_gradients(
            [(zero, kernel), (zero, bias), (zero, gamma), (None, gamma)], global_step=step
        )
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            sess.run(train)
            values = sess.run([kernel, bias, gamma, step])
            names = {v.op.name for v in tf.compat.v1.global_variables()}
    np.testing.assert_allclose(values[0], [2.0 - 0.1 * 0.5 * 2.0])
    np.testing.assert_allclose(values[1:3], [[2.0], [2.0]])
    assert values[3] == 1
    assert {"dense/kernel/adam_m", "dense/kernel/adam_v"} <= names  # google-research/bert's slot names


def test_create_optimizer_steps_clips_and_trains_in_a_single_process():
    with tf.Graph().as_default():
        w = tf.compat.v1.get_variable("w", initializer=tf.constant([3.0, -4.0]))
        loss = 1000.0 * tf.reduce_sum(tf.square(w))  # a huge gradient: clipped to norm 1 before Adam
        train = optimization.create_optimizer(loss, 0.1, num_train_steps=20, num_warmup_steps=0)
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            before = sess.run(loss)
            for _ in range(10):
                sess.run(train)
            assert sess.run(tf.compat.v1.train.get_global_step()) == 10
            assert sess.run(loss) < before


# --------------------------------------------------------------------------------------------------------
# Real runs
# --------------------------------------------------------------------------------------------------------


@pytest.mark.timeout(300)
def test_fine_tuning_learns(tmp_path, vocab_file):
    """Train on the shipped training questions and predict them again: F1 must rise far above chance.

    A tiny random BERT cannot generalise from 60 questions, but it can fit them: this checks that loss,
    labels, optimizer and answer decoding fit together. Measured (seeds 1-3): F1 about 4 before, 59-62 after.
    """
    common = [
        sys.executable,
        str(EXAMPLE_DIR / "run_squad.py"),
        *tiny_flags(vocab_file),
        f"--train_file={TRAIN_FILE}",
        f"--predict_file={TRAIN_FILE}",
        "--do_predict",
        "--eval",
        "--seed=1",
    ]
    run([*common, f"--output_dir={tmp_path / 'before'}"], timeout=200)
    run(
        [
            *common,
            f"--output_dir={tmp_path / 'after'}",
            "--do_train",
            "--num_train_epochs=20",
            "--learning_rate=2e-3",
        ],
        250,
    )
    before = json.loads((tmp_path / "before" / "eval_results.json").read_text())
    after = json.loads((tmp_path / "after" / "eval_results.json").read_text())
    assert after["f1"] >= before["f1"] + 20, (before, after)
    assert after["f1"] >= 35 and after["exact_match"] >= 25, after


@pytest.mark.multiprocess
@pytest.mark.timeout(300)
def test_two_workers_sharing_output_dir(tmp_path, vocab_file):
    """The README's command: both ranks get the same --output_dir, and rank 0 alone fills it."""
    out, digests = tmp_path / "out", tmp_path / "digests"
    horovodrun(
        EXAMPLE_DIR / "run_squad.py",
        *tiny_flags(vocab_file),
        "--do_train",
        "--do_predict",
        "--eval",
        f"--train_file={TRAIN_FILE}",
        f"--predict_file={DEV_FILE}",
        f"--num_train_epochs={EPOCHS}",
        f"--output_dir={out}",
        f"--variables_digest_dir={digests}",
    )
    ranks = [json.loads((digests / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert ranks[0]["sha256"] == ranks[1]["sha256"], ranks  # identical final variables

    steps = single_process_steps() // 2
    assert steps == 7 and checkpoint_step(out) == steps == ranks[1]["global_step"]

    names = set(os.listdir(out))
    assert {"predictions.json", "nbest_predictions.json", "eval_results.json", "checkpoint"} <= names
    assert "null_odds.json" not in names  # v1.1
    assert len([n for n in names if n.startswith("events.out.tfevents")]) == 1  # one writer
    predictions = json.loads((out / "predictions.json").read_text())
    dev = json.loads(DEV_FILE.read_text())["data"]
    assert set(predictions) == {qa["id"] for a in dev for p in a["paragraphs"] for qa in p["qas"]}


@pytest.mark.multiprocess
@pytest.mark.timeout(300)
def test_rank_1_writes_nothing_into_its_output_dir(tmp_path, vocab_file):
    """Each rank is handed its own --output_dir: rank 1's must stay empty (not even created)."""
    horovodrun(
        WORKERS / "run_squad_own_dirs.py",
        str(tmp_path),
        *tiny_flags(vocab_file),
        "--do_train",
        "--do_predict",
        f"--train_file={TRAIN_FILE}",
        f"--predict_file={DEV_FILE}",
        f"--num_train_epochs={EPOCHS}",
    )
    assert not (tmp_path / "rank1").exists(), sorted(os.listdir(tmp_path / "rank1"))
    rank0 = set(os.listdir(tmp_path / "rank0"))
    assert {"predictions.json", "nbest_predictions.json", "train.tf_record", "checkpoint"} <= rank0
    assert checkpoint_step(tmp_path / "rank0") == single_process_steps() // 2
