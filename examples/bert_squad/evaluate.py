"""The SQuAD v1.1 metric: exact match and token F1 after answer normalisation, best over the gold answers.

Reimplements the official v1.1 evaluation so that numbers are comparable with published SQuAD results.
Usage: `python evaluate.py dev-v1.1.json predictions.json` prints `{"exact_match": .., "f1": ..}` (percent).
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import string
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

EXPECTED_VERSION = "1.1"

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = frozenset(string.punctuation)


def normalize_answer(text: str) -> str:
    """Lower-case, drop ASCII punctuation and the articles a/an/the, and collapse whitespace."""
    text = text.lower()
    text = "".join(char for char in text if char not in _PUNCTUATION)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def exact_match_score(prediction: str, ground_truth: str) -> bool:
    return normalize_answer(prediction) == normalize_answer(ground_truth)


def f1_score(prediction: str, ground_truth: str) -> float:
    """Harmonic mean of token precision and recall, counting each shared token at most as often as in both."""
    prediction_tokens = normalize_answer(prediction).split()
    ground_truth_tokens = normalize_answer(ground_truth).split()
    common = collections.Counter(prediction_tokens) & collections.Counter(ground_truth_tokens)
    num_same = sum(common.values())
    if num_same == 0:
        return 0.0
    precision = num_same / len(prediction_tokens)
    recall = num_same / len(ground_truth_tokens)
    return 2 * precision * recall / (precision + recall)


def metric_max_over_ground_truths(
    metric_fn: Callable[[str, str], float], prediction: str, ground_truths: Sequence[str]
) -> float:
    """Questions have several gold answers; a prediction is scored against the one it matches best."""
    return max(metric_fn(prediction, ground_truth) for ground_truth in ground_truths)


def evaluate(dataset: Sequence[Mapping[str, Any]], predictions: Mapping[str, str]) -> dict[str, float]:
    """Score `predictions` (question id -> answer text) on a SQuAD `data` list; both metrics in percent.

    An unanswered question scores 0 and is reported on stderr, as in the official script, so a partial
    prediction file cannot look better than it is.
    """
    f1 = exact_match = 0.0
    total = 0
    for article in dataset:
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                total += 1
                if qa["id"] not in predictions:
                    print(f"Unanswered question {qa['id']} will receive score 0.", file=sys.stderr)
                    continue
                ground_truths = [answer["text"] for answer in qa["answers"]]
                prediction = predictions[qa["id"]]
                exact_match += metric_max_over_ground_truths(exact_match_score, prediction, ground_truths)
                f1 += metric_max_over_ground_truths(f1_score, prediction, ground_truths)
    if total == 0:
        raise ValueError("The dataset has no questions; expected SQuAD JSON with data[].paragraphs[].qas[].")
    return {"exact_match": 100.0 * exact_match / total, "f1": 100.0 * f1 / total}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=f"Evaluation for SQuAD {EXPECTED_VERSION}")
    parser.add_argument("dataset_file", help="Dataset file (SQuAD JSON)")
    parser.add_argument("prediction_file", help="Prediction file (JSON: question id -> answer text)")
    args = parser.parse_args(argv)
    with open(args.dataset_file, encoding="utf-8") as dataset_file:
        dataset_json = json.load(dataset_file)
    if dataset_json.get("version") != EXPECTED_VERSION:
        print(
            f"Evaluation expects v-{EXPECTED_VERSION}, but got dataset with v-{dataset_json.get('version')}",
            file=sys.stderr,
        )
    with open(args.prediction_file, encoding="utf-8") as prediction_file:
        predictions = json.load(prediction_file)
    print(json.dumps(evaluate(dataset_json["data"], predictions)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
