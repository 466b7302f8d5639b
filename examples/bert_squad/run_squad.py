"""Fine-tune BERT on SQuAD v1.1 / v2.0 with tf.estimator, in one process or on N Horovod workers.

Written from google-research/bert's published run_squad.py design (flags, feature conversion, the "max
context" rule, n-best answer decoding), without TPU code. The Horovod changes are kscale.estimator calls,
marked "kscale patch"; the same command runs alone or under
`horovodrun -np 2 -H localhost:2 python run_squad.py ...` (see README.md).
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import json
import math
import os
import random
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import evaluate
import modeling
import numpy as np
import optimization
import tensorflow as tf
import tokenization
from absl import app, flags, logging

import kscale.estimator
from kscale import environment

FLAGS = flags.FLAGS

# Files and model.
flags.DEFINE_string("bert_config_file", None, "bert_config.json of the pre-trained model.")
flags.DEFINE_string("vocab_file", None, "vocab.txt the model was trained with.")
flags.DEFINE_string("output_dir", None, "Where checkpoints and predictions go (written by rank 0 only).")
flags.DEFINE_string("train_file", None, "SQuAD JSON for training, e.g. train-v1.1.json.")
flags.DEFINE_string("predict_file", None, "SQuAD JSON to predict on, e.g. dev-v1.1.json.")
flags.DEFINE_string("init_checkpoint", None, "Pre-trained checkpoint to start from (e.g. bert_model.ckpt).")
flags.DEFINE_bool("do_lower_case", True, "Lower-case the input: True for uncased models.")
# Features.
flags.DEFINE_integer("max_seq_length", 384, "Tokens per feature after WordPiece; longer input is windowed.")
flags.DEFINE_integer("doc_stride", 128, "Tokens between the starts of consecutive document windows.")
flags.DEFINE_integer("max_query_length", 64, "Question tokens kept; longer questions are truncated.")
# Training.
flags.DEFINE_bool("do_train", False, "Fine-tune on --train_file.")
flags.DEFINE_bool("do_predict", False, "Predict answers for --predict_file.")
flags.DEFINE_integer("train_batch_size", 32, "Training batch size PER WORKER.")
flags.DEFINE_integer("predict_batch_size", 8, "Prediction batch size.")
flags.DEFINE_float("learning_rate", 5e-5, "Peak Adam learning rate for ONE worker (scaled per --lr_scaling).")
flags.DEFINE_float("num_train_epochs", 3.0, "Epochs over the training examples, for the whole job.")
flags.DEFINE_float("warmup_proportion", 0.1, "Fraction of training steps with linear learning-rate warm-up.")
flags.DEFINE_integer("save_checkpoints_steps", 1000, "Checkpoint every this many steps (rank 0).")
# Answers.
flags.DEFINE_integer("n_best_size", 20, "Candidates per question in nbest_predictions.json.")
flags.DEFINE_integer("max_answer_length", 30, "Longest answer, in WordPiece tokens.")
flags.DEFINE_bool("verbose_logging", False, "Log why predicted text could not be mapped to the context.")
flags.DEFINE_bool("version_2_with_negative", False, "SQuAD 2.0: some questions have no answer.")
flags.DEFINE_float("null_score_diff_threshold", 0.0, "SQuAD 2.0: predict no answer if null - best > this.")
# kscale additions.
flags.DEFINE_bool("horovod", None, "Run as Horovod workers. Default: detect from the launcher (horovodrun).")
flags.DEFINE_enum(
    "lr_scaling", "linear", list(kscale.estimator.LR_RULES), "Learning rate rule for N workers."
)
flags.DEFINE_enum("compression", "none", list(kscale.estimator.COMPRESSIONS), "Allreduce compression.")
flags.DEFINE_bool("eval", False, "After predicting, print exact match and F1 on --predict_file.")
flags.DEFINE_bool("tiny_config", False, "Tiny random BERT (BertConfig.tiny) instead of --bert_config_file.")
flags.DEFINE_integer("seed", 12345, "Seed for the graph, the example shuffle and the input pipeline.")
flags.DEFINE_string(
    "variables_digest_dir", None, "Debug: each rank writes a digest of its final variables here."
)

#: First feature id; ids only need to be unique within one run.
FIRST_UNIQUE_ID = 1_000_000_000


# ----------------------------------------------------------------------------------------------------------
# Reading SQuAD
# ----------------------------------------------------------------------------------------------------------


@dataclasses.dataclass
class SquadExample:
    """One question about one paragraph; positions are WORD indexes into `doc_tokens` (-1: no answer)."""

    qas_id: str
    question_text: str
    doc_tokens: list[str]
    orig_answer_text: str | None = None
    start_position: int | None = None
    end_position: int | None = None
    is_impossible: bool = False


@dataclasses.dataclass
class InputFeatures:
    """One window of one example, as token ids; positions are TOKEN indexes into the window."""

    unique_id: int
    example_index: int
    doc_span_index: int
    tokens: list[str]
    token_to_orig_map: dict[int, int]
    token_is_max_context: dict[int, bool]
    input_ids: list[int]
    input_mask: list[int]
    segment_ids: list[int]
    start_position: int | None = None
    end_position: int | None = None
    is_impossible: bool = False


def is_whitespace(char: str) -> bool:
    """Whitespace as SQuAD's contexts use it, including the narrow no-break space (U+202F)."""
    return char in (" ", "\t", "\r", "\n") or ord(char) == 0x202F


def split_context(text: str) -> tuple[list[str], list[int]]:
    """Whitespace words of `text` and, for every character, the index of the word it belongs to.

    SQuAD gives answers as character offsets; this map turns them into word positions.
    """
    doc_tokens: list[str] = []
    char_to_word_offset: list[int] = []
    previous_was_space = True
    for char in text:
        if is_whitespace(char):
            previous_was_space = True
        else:
            if previous_was_space:
                doc_tokens.append(char)
            else:
                doc_tokens[-1] += char
            previous_was_space = False
        char_to_word_offset.append(len(doc_tokens) - 1)
    return doc_tokens, char_to_word_offset


def read_squad_examples(
    input_file: str, is_training: bool, version_2_with_negative: bool
) -> list[SquadExample]:
    """Every question in a SQuAD JSON file; for training also its answer span in words.

    Training examples whose answer text cannot be found at its offset (a few in SQuAD, after whitespace
    clean-up) are skipped with a warning rather than trained on a wrong span.
    """
    with tf.io.gfile.GFile(input_file, "r") as reader:
        data = json.load(reader)["data"]
    examples = []
    for article in data:
        for paragraph in article["paragraphs"]:
            doc_tokens, char_to_word_offset = split_context(paragraph["context"])
            for qa in paragraph["qas"]:
                example = SquadExample(qas_id=qa["id"], question_text=qa["question"], doc_tokens=doc_tokens)
                if is_training:
                    example.is_impossible = version_2_with_negative and bool(qa.get("is_impossible", False))
                    if example.is_impossible:
                        example.start_position, example.end_position, example.orig_answer_text = -1, -1, ""
                    else:
                        if len(qa["answers"]) != 1:
                            raise ValueError(
                                f"training question {qa['id']} has {len(qa['answers'])} answers; SQuAD training "
                                "data has exactly one per answerable question."
                            )
                        answer = qa["answers"][0]
                        start_char, text = answer["answer_start"], answer["text"]
                        example.orig_answer_text = text
                        example.start_position = char_to_word_offset[start_char]
                        example.end_position = char_to_word_offset[start_char + len(text) - 1]
                        actual = " ".join(doc_tokens[example.start_position : example.end_position + 1])
                        expected = " ".join(tokenization.whitespace_tokenize(text))
                        if expected not in actual:
                            logging.warning(
                                "Skipping %s: answer %r not found in %r", qa["id"], expected, actual
                            )
                            continue
                examples.append(example)
    return examples


# ----------------------------------------------------------------------------------------------------------
# Examples -> features
# ----------------------------------------------------------------------------------------------------------

DocSpan = collections.namedtuple("DocSpan", ["start", "length"])


def doc_spans(num_tokens: int, max_tokens_for_doc: int, doc_stride: int) -> list[DocSpan]:
    """Windows of at most `max_tokens_for_doc` tokens, `doc_stride` apart, covering the whole document."""
    spans = []
    start = 0
    while start < num_tokens:
        length = min(num_tokens - start, max_tokens_for_doc)
        spans.append(DocSpan(start, length))
        if start + length == num_tokens:
            break
        start += min(length, doc_stride)
    return spans


def check_is_max_context(spans: Sequence[DocSpan], span_index: int, position: int) -> bool:
    """Whether window `span_index` is the best window for token `position`.

    A token appears in several overlapping windows; its prediction is taken from the window where it has
    the most context on both sides: score = min(left, right) + 0.01 * window length.
    """
    best_score, best_index = None, None
    for index, span in enumerate(spans):
        end = span.start + span.length - 1
        if position < span.start or position > end:
            continue
        score = min(position - span.start, end - position) + 0.01 * span.length
        if best_score is None or score > best_score:
            best_score, best_index = score, index
    return span_index == best_index


def improve_answer_span(
    doc_tokens: Sequence[str], start: int, end: int, tokenizer: tokenization.FullTokenizer, answer: str
) -> tuple[int, int]:
    """Narrow a word-level answer span to the WordPiece tokens that spell the answer exactly.

    The answer "1895" in the word "(1895-1943)." spans the whole word; its tokens include "1895" alone.
    """
    answer_tokens = " ".join(tokenizer.tokenize(answer))
    for new_start in range(start, end + 1):
        for new_end in range(end, new_start - 1, -1):
            if " ".join(doc_tokens[new_start : new_end + 1]) == answer_tokens:
                return new_start, new_end
    return start, end


def convert_examples_to_features(
    examples: Sequence[SquadExample],
    tokenizer: tokenization.FullTokenizer,
    max_seq_length: int,
    doc_stride: int,
    max_query_length: int,
    is_training: bool,
    output_fn: Callable[[InputFeatures], None],
) -> int:
    """Tokenise every example into `[CLS] question [SEP] window [SEP]` features; returns how many.

    Long documents become several overlapping windows. In training, a window that does not contain the
    whole answer gets the [CLS] position (0) as its answer, like an unanswerable question.
    """
    unique_id = FIRST_UNIQUE_ID
    for example_index, example in enumerate(examples):
        query_tokens = tokenizer.tokenize(example.question_text)[:max_query_length]

        tok_to_orig_index: list[int] = []
        orig_to_tok_index: list[int] = []
        all_doc_tokens: list[str] = []
        for i, word in enumerate(example.doc_tokens):
            orig_to_tok_index.append(len(all_doc_tokens))
            for piece in tokenizer.tokenize(word):
                tok_to_orig_index.append(i)
                all_doc_tokens.append(piece)

        tok_start = tok_end = None
        if is_training and example.is_impossible:
            tok_start = tok_end = -1
        elif is_training:
            tok_start = orig_to_tok_index[example.start_position]
            if example.end_position < len(example.doc_tokens) - 1:
                tok_end = orig_to_tok_index[example.end_position + 1] - 1
            else:
                tok_end = len(all_doc_tokens) - 1
            tok_start, tok_end = improve_answer_span(
                all_doc_tokens, tok_start, tok_end, tokenizer, example.orig_answer_text
            )

        max_tokens_for_doc = max_seq_length - len(query_tokens) - 3  # [CLS], [SEP], [SEP]
        spans = doc_spans(len(all_doc_tokens), max_tokens_for_doc, doc_stride)
        for span_index, span in enumerate(spans):
            tokens = ["[CLS]", *query_tokens, "[SEP]"]
            segment_ids = [0] * len(tokens)
            token_to_orig_map: dict[int, int] = {}
            token_is_max_context: dict[int, bool] = {}
            for i in range(span.length):
                position = span.start + i
                token_to_orig_map[len(tokens)] = tok_to_orig_index[position]
                token_is_max_context[len(tokens)] = check_is_max_context(spans, span_index, position)
                tokens.append(all_doc_tokens[position])
                segment_ids.append(1)
            tokens.append("[SEP]")
            segment_ids.append(1)

            input_ids = tokenizer.convert_tokens_to_ids(tokens)
            input_mask = [1] * len(input_ids)
            padding = max_seq_length - len(input_ids)
            input_ids += [0] * padding
            input_mask += [0] * padding
            segment_ids += [0] * padding

            start_position = end_position = None
            if is_training and not example.is_impossible:
                span_end = span.start + span.length - 1
                if tok_start < span.start or tok_end > span_end:
                    start_position = end_position = 0  # the answer is not in this window: point at [CLS]
                else:
                    offset = len(query_tokens) + 2
                    start_position = tok_start - span.start + offset
                    end_position = tok_end - span.start + offset
            elif is_training:
                start_position = end_position = 0

            output_fn(
                InputFeatures(
                    unique_id=unique_id,
                    example_index=example_index,
                    doc_span_index=span_index,
                    tokens=tokens,
                    token_to_orig_map=token_to_orig_map,
                    token_is_max_context=token_is_max_context,
                    input_ids=input_ids,
                    input_mask=input_mask,
                    segment_ids=segment_ids,
                    start_position=start_position,
                    end_position=end_position,
                    is_impossible=example.is_impossible,
                )
            )
            unique_id += 1
    return unique_id - FIRST_UNIQUE_ID


class FeatureWriter:
    """Writes features to a TFRecord file, the format the Estimator's input pipeline streams from."""

    def __init__(self, filename: str, is_training: bool) -> None:
        self.filename = filename
        self.is_training = is_training
        self.num_features = 0
        self._writer = tf.io.TFRecordWriter(filename)

    def process_feature(self, feature: InputFeatures) -> None:
        def ints(values: Iterable[int]) -> tf.train.Feature:
            return tf.train.Feature(int64_list=tf.train.Int64List(value=list(values)))

        record = {
            "unique_ids": ints([feature.unique_id]),
            "input_ids": ints(feature.input_ids),
            "input_mask": ints(feature.input_mask),
            "segment_ids": ints(feature.segment_ids),
        }
        if self.is_training:
            record["start_positions"] = ints([feature.start_position])
            record["end_positions"] = ints([feature.end_position])
            record["is_impossible"] = ints([int(feature.is_impossible)])
        example = tf.train.Example(features=tf.train.Features(feature=record))
        self._writer.write(example.SerializeToString())
        self.num_features += 1

    def close(self) -> None:
        self._writer.close()


def input_fn_builder(
    input_file: str, seq_length: int, is_training: bool, batch_size: int, seed: int | None = None
) -> Callable[[], tf.data.Dataset]:
    """An Estimator input_fn over a FeatureWriter file; training input is sharded per worker."""
    name_to_features = {
        "unique_ids": tf.io.FixedLenFeature([], tf.int64),
        "input_ids": tf.io.FixedLenFeature([seq_length], tf.int64),
        "input_mask": tf.io.FixedLenFeature([seq_length], tf.int64),
        "segment_ids": tf.io.FixedLenFeature([seq_length], tf.int64),
    }
    if is_training:
        name_to_features["start_positions"] = tf.io.FixedLenFeature([], tf.int64)
        name_to_features["end_positions"] = tf.io.FixedLenFeature([], tf.int64)

    def decode(record: tf.Tensor) -> dict[str, tf.Tensor]:
        # tf.Example stores int64; the model and the allreduce are happier with int32.
        return {
            k: tf.cast(v, tf.int32) for k, v in tf.io.parse_single_example(record, name_to_features).items()
        }

    def input_fn() -> tf.data.Dataset:
        dataset = tf.data.TFRecordDataset(input_file)
        if is_training:
            # kscale patch 4: each worker trains on its own 1/N of the features. Shard BEFORE repeat and
            # shuffle; otherwise the workers' shuffled streams overlap and the job sees fewer examples.
            dataset = kscale.estimator.shard_dataset(dataset)
            dataset = dataset.repeat().shuffle(buffer_size=100, seed=seed)
        return dataset.map(decode).batch(batch_size, drop_remainder=is_training)

    return input_fn


# ----------------------------------------------------------------------------------------------------------
# Model
# ----------------------------------------------------------------------------------------------------------


def create_model(
    bert_config: modeling.BertConfig,
    is_training: bool,
    input_ids: tf.Tensor,
    input_mask: tf.Tensor,
    segment_ids: tf.Tensor,
) -> tuple[tf.Tensor, tf.Tensor]:
    """BERT plus SQuAD's head: one linear layer giving every token a start and an end logit."""
    model = modeling.BertModel(bert_config, is_training, input_ids, input_mask, segment_ids)
    sequence = model.get_sequence_output()
    batch_size, seq_length, hidden_size = modeling.get_shape_list(sequence, expected_rank=3)
    weights = tf.compat.v1.get_variable(
        "cls/squad/output_weights",
        [2, hidden_size],
        initializer=tf.compat.v1.truncated_normal_initializer(stddev=0.02),
    )
    bias = tf.compat.v1.get_variable("cls/squad/output_bias", [2], initializer=tf.zeros_initializer())
    logits = tf.matmul(tf.reshape(sequence, [-1, hidden_size]), weights, transpose_b=True) + bias
    logits = tf.transpose(tf.reshape(logits, [batch_size, seq_length, 2]), [2, 0, 1])
    start_logits, end_logits = tf.unstack(logits, axis=0)
    return start_logits, end_logits


def model_fn_builder(
    bert_config: modeling.BertConfig,
    init_checkpoint: str | None,
    learning_rate: float,
    num_train_steps: int,
    num_warmup_steps: int,
    lr_scaling: str = "linear",
    compression: str | None = None,
) -> Callable[..., tf.estimator.EstimatorSpec]:
    """The Estimator model_fn: loss and train op for TRAIN, start/end logits for PREDICT."""

    def model_fn(features, labels, mode, params):
        del labels, params  # the Estimator's calling convention; labels live in `features`
        is_training = mode == tf.estimator.ModeKeys.TRAIN
        start_logits, end_logits = create_model(
            bert_config, is_training, features["input_ids"], features["input_mask"], features["segment_ids"]
        )
        tvars = tf.compat.v1.trainable_variables()
        initialized: dict[str, int] = {}
        if init_checkpoint:
            assignment_map, initialized = modeling.get_assignment_map_from_checkpoint(tvars, init_checkpoint)
            tf.compat.v1.train.init_from_checkpoint(init_checkpoint, assignment_map)
        if kscale.estimator.is_chief():
            logging.info(
                "%d trainable variables, %d from %s", len(tvars), len(initialized) // 2, init_checkpoint
            )

        if is_training:
            seq_length = modeling.get_shape_list(features["input_ids"])[1]

            def span_loss(logits: tf.Tensor, positions: tf.Tensor) -> tf.Tensor:
                one_hot = tf.one_hot(positions, depth=seq_length, dtype=tf.float32)
                return -tf.reduce_mean(tf.reduce_sum(one_hot * tf.nn.log_softmax(logits, axis=-1), axis=-1))

            loss = (
                span_loss(start_logits, features["start_positions"])
                + span_loss(end_logits, features["end_positions"])
            ) / 2.0
            train_op = optimization.create_optimizer(
                loss,
                learning_rate,
                num_train_steps,
                num_warmup_steps,
                lr_scaling=lr_scaling,
                compression=compression,
            )
            return tf.estimator.EstimatorSpec(mode, loss=loss, train_op=train_op)
        if mode == tf.estimator.ModeKeys.PREDICT:
            predictions = {
                "unique_ids": features["unique_ids"],
                "start_logits": start_logits,
                "end_logits": end_logits,
            }
            return tf.estimator.EstimatorSpec(mode, predictions=predictions)
        raise ValueError(f"run_squad supports TRAIN and PREDICT, not {mode}.")

    return model_fn


class VariablesDigestHook(tf.compat.v1.train.SessionRunHook):
    """At the end of training, write a SHA-256 of every global variable's value: equal digests on all ranks
    show that Horovod kept the workers in sync (only rank 0 has a checkpoint to compare otherwise)."""

    def __init__(self, path: str) -> None:
        self.path = path

    def end(self, session: tf.compat.v1.Session) -> None:
        variables = sorted(tf.compat.v1.global_variables(), key=lambda v: v.op.name)
        values = session.run(variables)
        digest = hashlib.sha256()
        for var, value in zip(variables, values):
            digest.update(var.op.name.encode())
            digest.update(np.ascontiguousarray(value).tobytes())
        step = session.run(tf.compat.v1.train.get_global_step())
        env = environment.current()
        with open(self.path, "w", encoding="utf-8") as f:
            json.dump({"rank": env.rank, "global_step": int(step), "sha256": digest.hexdigest()}, f)


# ----------------------------------------------------------------------------------------------------------
# Predictions
# ----------------------------------------------------------------------------------------------------------

RawResult = collections.namedtuple("RawResult", ["unique_id", "start_logits", "end_logits"])
_Prelim = collections.namedtuple(
    "_Prelim", ["feature_index", "start_index", "end_index", "start_logit", "end_logit"]
)
_NBest = collections.namedtuple("_NBest", ["text", "start_logit", "end_logit"])


def write_predictions(
    all_examples: Sequence[SquadExample],
    all_features: Sequence[InputFeatures],
    all_results: Sequence[RawResult],
    n_best_size: int,
    max_answer_length: int,
    do_lower_case: bool,
    output_prediction_file: str,
    output_nbest_file: str,
    output_null_log_odds_file: str | None,
    version_2_with_negative: bool = False,
    null_score_diff_threshold: float = 0.0,
) -> dict[str, str]:
    """Pick each question's answer from its features' logits and write the JSON files; returns the answers.

    Candidates are the n best start and end tokens of every window, kept if the span is valid (inside the
    document, end after start, at most `max_answer_length` tokens, start in its max-context window) and
    ranked by start + end logit. For v2.0 the [CLS] span is the "no answer" candidate: predict "" when its
    score beats the best real span by more than `null_score_diff_threshold`.
    """
    features_by_example: dict[int, list[InputFeatures]] = collections.defaultdict(list)
    for feature in all_features:
        features_by_example[feature.example_index].append(feature)
    result_by_id = {result.unique_id: result for result in all_results}

    all_predictions: dict[str, str] = {}
    all_nbest: dict[str, list[dict[str, Any]]] = {}
    scores_diff: dict[str, float] = {}
    for example_index, example in enumerate(all_examples):
        prelim: list[_Prelim] = []
        null = None  # (score, feature_index, start_logit, end_logit) of the best "no answer"
        for feature_index, feature in enumerate(features_by_example[example_index]):
            result = result_by_id[feature.unique_id]
            if version_2_with_negative:
                score = result.start_logits[0] + result.end_logits[0]
                if null is None or score < null[0]:
                    null = (score, feature_index, result.start_logits[0], result.end_logits[0])
            for start in best_indexes(result.start_logits, n_best_size):
                for end in best_indexes(result.end_logits, n_best_size):
                    if not is_valid_span(feature, start, end, max_answer_length):
                        continue
                    prelim.append(
                        _Prelim(feature_index, start, end, result.start_logits[start], result.end_logits[end])
                    )
        if version_2_with_negative and null is not None:
            prelim.append(_Prelim(null[1], 0, 0, null[2], null[3]))
        prelim.sort(key=lambda p: p.start_logit + p.end_logit, reverse=True)

        seen: set[str] = set()
        nbest: list[_NBest] = []
        for pred in prelim:
            if len(nbest) >= n_best_size:
                break
            feature = features_by_example[example_index][pred.feature_index]
            if pred.start_index > 0:
                text = answer_text(example, feature, pred.start_index, pred.end_index, do_lower_case)
            else:
                text = ""
            if text in seen:
                continue
            seen.add(text)
            nbest.append(_NBest(text, pred.start_logit, pred.end_logit))
        if version_2_with_negative and "" not in seen and null is not None:
            nbest.append(_NBest("", null[2], null[3]))
        if not nbest:
            nbest.append(_NBest("empty", 0.0, 0.0))

        probabilities = softmax([e.start_logit + e.end_logit for e in nbest])
        all_nbest[example.qas_id] = [
            {
                "text": e.text,
                "probability": float(p),
                "start_logit": float(e.start_logit),
                "end_logit": float(e.end_logit),
            }
            for e, p in zip(nbest, probabilities)
        ]
        best_non_null = next((e for e in nbest if e.text), None)
        if not version_2_with_negative:
            all_predictions[example.qas_id] = nbest[0].text
        else:
            if best_non_null is None:
                all_predictions[example.qas_id] = ""
                scores_diff[example.qas_id] = float("inf")
                continue
            diff = null[0] - best_non_null.start_logit - best_non_null.end_logit
            scores_diff[example.qas_id] = float(diff)
            all_predictions[example.qas_id] = "" if diff > null_score_diff_threshold else best_non_null.text

    _write_json(output_prediction_file, all_predictions)
    _write_json(output_nbest_file, all_nbest)
    if version_2_with_negative and output_null_log_odds_file:
        _write_json(output_null_log_odds_file, scores_diff)
    return all_predictions


def is_valid_span(feature: InputFeatures, start: int, end: int, max_answer_length: int) -> bool:
    """A span can be an answer if it lies in the document part, in order, short enough, and in the window
    that gives its start the most context (other windows see it too, with less context)."""
    if start >= len(feature.tokens) or end >= len(feature.tokens):
        return False
    if start not in feature.token_to_orig_map or end not in feature.token_to_orig_map:
        return False
    if not feature.token_is_max_context.get(start, False):
        return False
    return start <= end and end - start + 1 <= max_answer_length


def answer_text(
    example: SquadExample, feature: InputFeatures, start: int, end: int, do_lower_case: bool
) -> str:
    """The original context text for the token span (not the lower-cased, WordPiece-split tokens)."""
    tok_text = " ".join(feature.tokens[start : end + 1]).replace(" ##", "").replace("##", "")
    tok_text = " ".join(tok_text.strip().split())
    orig_start, orig_end = feature.token_to_orig_map[start], feature.token_to_orig_map[end]
    orig_text = " ".join(example.doc_tokens[orig_start : orig_end + 1])
    return get_final_text(tok_text, orig_text, do_lower_case)


def get_final_text(pred_text: str, orig_text: str, do_lower_case: bool) -> str:
    """Project a normalised prediction back onto the original words.

    `pred_text` is lower-cased and split at punctuation ("steve smith's" for the word "Smith's," we want
    "Smith's"). Tokenise `orig_text` the same way, align the two character by character ignoring spaces,
    and cut `orig_text` at the aligned positions; if anything does not line up, return `orig_text`.
    """

    def strip_spaces(text: str) -> tuple[str, dict[int, int]]:
        chars, mapping = [], {}
        for i, char in enumerate(text):
            if char == " ":
                continue
            mapping[len(chars)] = i
            chars.append(char)
        return "".join(chars), mapping

    tok_text = " ".join(tokenization.BasicTokenizer(do_lower_case=do_lower_case).tokenize(orig_text))
    start = tok_text.find(pred_text)
    if start == -1:
        if FLAGS.is_parsed() and FLAGS.verbose_logging:
            logging.info("Could not find %r in %r", pred_text, orig_text)
        return orig_text
    end = start + len(pred_text) - 1

    orig_ns, orig_map = strip_spaces(orig_text)
    tok_ns, tok_map = strip_spaces(tok_text)
    if len(orig_ns) != len(tok_ns):
        if FLAGS.is_parsed() and FLAGS.verbose_logging:
            logging.info("Length not equal after stripping spaces: %r vs %r", orig_ns, tok_ns)
        return orig_text
    tok_to_orig_ns = {tok_index: i for i, tok_index in tok_map.items()}

    orig_start = orig_map.get(tok_to_orig_ns.get(start, -1))
    orig_end = orig_map.get(tok_to_orig_ns.get(end, -1))
    if orig_start is None or orig_end is None:
        return orig_text
    return orig_text[orig_start : orig_end + 1]


def best_indexes(logits: Sequence[float], n_best_size: int) -> list[int]:
    """Indexes of the `n_best_size` largest logits, largest first."""
    return [int(i) for i in np.argsort(-np.asarray(logits), kind="stable")[:n_best_size]]


def softmax(scores: Sequence[float]) -> list[float]:
    """Probabilities of the n-best entries (numerically stable)."""
    if not scores:
        return []
    top = max(scores)
    exps = [math.exp(s - top) for s in scores]
    total = sum(exps)
    return [e / total for e in exps]


def _write_json(path: str, value: Any) -> None:
    with tf.io.gfile.GFile(path, "w") as writer:
        writer.write(json.dumps(value, indent=4) + "\n")


# ----------------------------------------------------------------------------------------------------------
# main
# ----------------------------------------------------------------------------------------------------------


def validate_flags() -> None:
    """Fail before any work on flags that cannot work together."""
    if not FLAGS.do_train and not FLAGS.do_predict:
        raise ValueError("At least one of --do_train or --do_predict must be set.")
    if FLAGS.do_train and not FLAGS.train_file:
        raise ValueError("--do_train needs --train_file.")
    if FLAGS.do_predict and not FLAGS.predict_file:
        raise ValueError("--do_predict needs --predict_file.")
    if not FLAGS.tiny_config and not FLAGS.bert_config_file:
        raise ValueError("Pass --bert_config_file (or --tiny_config for a tiny random model).")
    if FLAGS.max_seq_length <= FLAGS.max_query_length + 3:
        raise ValueError(
            f"--max_seq_length ({FLAGS.max_seq_length}) must exceed --max_query_length ({FLAGS.max_query_length}) "
            "+ 3 so that some document fits in each window."
        )
    env = environment.current()
    if FLAGS.horovod is False and env.is_distributed:
        raise ValueError(
            f"--nohorovod, but this process was started as {env.describe()}: the workers would train "
            "independently and overwrite each other's output. Drop --nohorovod or start one process."
        )
    if FLAGS.horovod and not env.is_distributed:
        logging.warning("--horovod given, but this is a single process (%s): running alone.", env.describe())


def bert_config_for(vocab_size: int) -> modeling.BertConfig:
    if FLAGS.tiny_config:
        return modeling.BertConfig.tiny(vocab_size)
    config = modeling.BertConfig.from_json_file(FLAGS.bert_config_file)
    if FLAGS.max_seq_length > config.max_position_embeddings:
        raise ValueError(
            f"--max_seq_length {FLAGS.max_seq_length} is longer than the model's "
            f"max_position_embeddings {config.max_position_embeddings}."
        )
    return config


def main(argv: Sequence[str]) -> None:
    del argv
    logging.set_verbosity(logging.INFO)
    tf.compat.v1.logging.set_verbosity(tf.compat.v1.logging.INFO)
    tf.get_logger().propagate = False  # TF has its own handler; absl's would print every line twice
    validate_flags()
    env = environment.current()
    is_chief = kscale.estimator.is_chief()
    logging.info("run_squad: %s", env.describe())

    tokenization.validate_case_matches_checkpoint(FLAGS.do_lower_case, FLAGS.init_checkpoint)
    tokenizer = tokenization.FullTokenizer(FLAGS.vocab_file, FLAGS.do_lower_case)
    bert_config = bert_config_for(len(tokenizer.vocab))
    if is_chief:
        tf.io.gfile.makedirs(FLAGS.output_dir)

    # kscale patch 5: GPU per local rank; only rank 0 checkpoints into --output_dir, other ranks get a
    # private temporary model_dir (they hold the same variables, so their checkpoints would be copies).
    run_config = kscale.estimator.run_config(
        FLAGS.output_dir, save_checkpoints_steps=FLAGS.save_checkpoints_steps, tf_random_seed=FLAGS.seed
    )
    work_dir = run_config.model_dir  # --output_dir on rank 0, the private directory elsewhere

    train_examples: list[SquadExample] = []
    num_train_steps = num_warmup_steps = 0
    if FLAGS.do_train:
        train_examples = read_squad_examples(FLAGS.train_file, True, FLAGS.version_2_with_negative)
        # Every worker shuffles identically, so the shards cut from the same file are disjoint.
        random.Random(FLAGS.seed).shuffle(train_examples)
        # kscale patch 6: steps PER WORKER = single-process steps // N; the warm-up is a proportion of
        # those (not divided by N a second time).
        num_train_steps = kscale.estimator.num_train_steps(
            len(train_examples), FLAGS.train_batch_size, FLAGS.num_train_epochs
        )
        num_warmup_steps = kscale.estimator.num_warmup_steps(num_train_steps, FLAGS.warmup_proportion)

    model_fn = model_fn_builder(
        bert_config,
        FLAGS.init_checkpoint,
        FLAGS.learning_rate,
        num_train_steps,
        num_warmup_steps,
        lr_scaling=FLAGS.lr_scaling,
        compression=FLAGS.compression,
    )
    estimator = tf.estimator.Estimator(model_fn=model_fn, config=run_config)

    if FLAGS.do_train:
        # Each worker writes its own copy of the features, into a directory only it writes to.
        train_writer = FeatureWriter(os.path.join(work_dir, "train.tf_record"), is_training=True)
        convert_examples_to_features(
            train_examples,
            tokenizer,
            FLAGS.max_seq_length,
            FLAGS.doc_stride,
            FLAGS.max_query_length,
            is_training=True,
            output_fn=train_writer.process_feature,
        )
        train_writer.close()
        logging.info(
            "Training: %d examples, %d features, batch %d per worker x %d workers, %d steps per worker "
            "(%d warm-up), peak learning rate %.3g",
            len(train_examples),
            train_writer.num_features,
            FLAGS.train_batch_size,
            env.world_size,
            num_train_steps,
            num_warmup_steps,
            kscale.estimator.scale_learning_rate(FLAGS.learning_rate, FLAGS.lr_scaling),
        )
        train_input_fn = input_fn_builder(
            train_writer.filename,
            FLAGS.max_seq_length,
            True,
            FLAGS.train_batch_size,
            seed=FLAGS.seed + env.rank,
        )
        # kscale patch 7: start every worker from rank 0's variables; log global examples/sec on rank 0.
        hooks = kscale.estimator.training_hooks(FLAGS.train_batch_size, every_n_steps=100)
        if FLAGS.variables_digest_dir:
            tf.io.gfile.makedirs(FLAGS.variables_digest_dir)
            hooks.append(
                VariablesDigestHook(os.path.join(FLAGS.variables_digest_dir, f"rank{env.rank}.json"))
            )
        estimator.train(input_fn=train_input_fn, max_steps=num_train_steps, hooks=hooks)

    # kscale patch 8: the ranks hold identical weights after training; rank 0 alone predicts and writes.
    if FLAGS.do_predict and is_chief:
        predict(estimator, tokenizer)


def predict(estimator: tf.estimator.Estimator, tokenizer: tokenization.FullTokenizer) -> dict[str, str]:
    """Predict --predict_file, write predictions.json and nbest_predictions.json, optionally evaluate."""
    eval_examples = read_squad_examples(FLAGS.predict_file, False, FLAGS.version_2_with_negative)
    eval_writer = FeatureWriter(os.path.join(FLAGS.output_dir, "eval.tf_record"), is_training=False)
    eval_features: list[InputFeatures] = []

    def keep(feature: InputFeatures) -> None:
        eval_features.append(feature)
        eval_writer.process_feature(feature)

    convert_examples_to_features(
        eval_examples,
        tokenizer,
        FLAGS.max_seq_length,
        FLAGS.doc_stride,
        FLAGS.max_query_length,
        is_training=False,
        output_fn=keep,
    )
    eval_writer.close()
    logging.info("Predicting: %d examples, %d features", len(eval_examples), len(eval_features))

    input_fn = input_fn_builder(eval_writer.filename, FLAGS.max_seq_length, False, FLAGS.predict_batch_size)
    results = [
        RawResult(
            int(r["unique_ids"]), [float(x) for x in r["start_logits"]], [float(x) for x in r["end_logits"]]
        )
        for r in estimator.predict(input_fn, yield_single_examples=True)
    ]
    predictions = write_predictions(
        eval_examples,
        eval_features,
        results,
        FLAGS.n_best_size,
        FLAGS.max_answer_length,
        FLAGS.do_lower_case,
        os.path.join(FLAGS.output_dir, "predictions.json"),
        os.path.join(FLAGS.output_dir, "nbest_predictions.json"),
        os.path.join(FLAGS.output_dir, "null_odds.json"),
        FLAGS.version_2_with_negative,
        FLAGS.null_score_diff_threshold,
    )
    if FLAGS.eval:
        with tf.io.gfile.GFile(FLAGS.predict_file, "r") as reader:
            dataset = json.load(reader)["data"]
        scores = evaluate.evaluate(dataset, predictions)
        _write_json(os.path.join(FLAGS.output_dir, "eval_results.json"), scores)
        print(f"EVAL exact_match={scores['exact_match']:.2f} f1={scores['f1']:.2f}", flush=True)
    return predictions


if __name__ == "__main__":
    flags.mark_flags_as_required(["vocab_file", "output_dir"])
    app.run(main)
