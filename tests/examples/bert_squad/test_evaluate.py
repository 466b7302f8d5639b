"""The SQuAD v1.1 metric on hand-scored predictions, its CLI, and the bundled mini datasets' integrity."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import evaluate
import pytest

EXAMPLE_DIR = Path(evaluate.__file__).resolve().parent

DATASET = [
    {
        "title": "Hand_scored",
        "paragraphs": [
            {
                "context": "(the answers below need not be in the context for scoring)",
                "qas": [
                    {"id": "exact", "answers": [{"text": "Denver Broncos"}, {"text": "The Denver Broncos"}]},
                    {"id": "partial", "answers": [{"text": "Carolina Panthers"}]},
                    {"id": "wrong", "answers": [{"text": "Santa Clara"}]},
                    {
                        "id": "best_gold",
                        "answers": [{"text": "February 7"}, {"text": "Sunday, February 7, 2016"}],
                    },
                    {"id": "normalised", "answers": [{"text": "apple"}]},
                    {"id": "missing", "answers": [{"text": "anything"}]},
                ],
            }
        ],
    }
]

PREDICTIONS = {
    "exact": "Denver Broncos",  # EM 1, F1 1
    # "carolina panthers team" vs "carolina panthers": 2 shared tokens, P = 2/3, R = 2/2,
    # F1 = 2 * (2/3) * 1 / (2/3 + 1) = (4/3) / (5/3) = 0.8; EM 0.
    "partial": "the Carolina Panthers team",
    "wrong": "Levi's Stadium",  # EM 0, F1 0
    # "february 7 2016" vs "february 7": P = 2/3, R = 1 -> 0.8.
    # vs "sunday february 7 2016": 3 shared, P = 3/3, R = 3/4 -> 2 * 0.75 / 1.75 = 6/7. Max: 6/7; EM 0.
    "best_gold": "February 7, 2016",
    "normalised": "An Apple!",  # article and punctuation removed, lower-cased: "apple" -> EM 1, F1 1
    # "missing" has no prediction: 0 and 0.
}

# EM = (1 + 0 + 0 + 0 + 1 + 0) / 6; F1 = (1 + 0.8 + 0 + 6/7 + 1 + 0) / 6; both in percent.
EXPECTED_EM = 100.0 * 2 / 6
EXPECTED_F1 = 100.0 * (2.8 + 6 / 7) / 6


def test_evaluate_hand_scored(capsys: pytest.CaptureFixture[str]):
    result = evaluate.evaluate(DATASET, PREDICTIONS)
    assert result["exact_match"] == pytest.approx(EXPECTED_EM)
    assert result["f1"] == pytest.approx(EXPECTED_F1)
    assert result["f1"] == pytest.approx(60.952381, abs=1e-6)
    assert "Unanswered question missing will receive score 0." in capsys.readouterr().err


@pytest.mark.parametrize(
    ("text", "normalised"),
    [
        ("The  Cat, the HAT!", "cat hat"),
        ("an apple a day", "apple day"),
        ("theatre an anthem", "theatre anthem"),  # articles only as whole words
        ("U.S.-based", "usbased"),  # punctuation is removed, not replaced by a space
        ("  spaced\tout\n", "spaced out"),
    ],
)
def test_normalize_answer(text: str, normalised: str):
    assert evaluate.normalize_answer(text) == normalised


def test_f1_counts_repeated_tokens_once_per_match():
    # ["cat", "cat"] vs ["cat"]: one shared token, P = 1/2, R = 1/1 -> F1 = 2/3.
    assert evaluate.f1_score("the cat cat", "a cat") == pytest.approx(2 / 3)
    assert evaluate.f1_score("", "cat") == 0.0
    assert evaluate.f1_score("the", "an") == 0.0  # both normalise to nothing: no shared token


def test_empty_dataset_is_an_error():
    with pytest.raises(ValueError, match="no questions"):
        evaluate.evaluate([], {})


def test_cli(tmp_path: Path):
    dataset_file = tmp_path / "dev.json"
    dataset_file.write_text(json.dumps({"version": "1.1", "data": DATASET}), encoding="utf-8")
    prediction_file = tmp_path / "predictions.json"
    prediction_file.write_text(json.dumps(PREDICTIONS), encoding="utf-8")
    completed = subprocess.run(
        [sys.executable, str(EXAMPLE_DIR / "evaluate.py"), str(dataset_file), str(prediction_file)],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    result = json.loads(completed.stdout)
    assert result == {"exact_match": pytest.approx(EXPECTED_EM), "f1": pytest.approx(EXPECTED_F1)}
    assert "Unanswered question missing" in completed.stderr


def test_cli_warns_on_other_version(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    dataset_file = tmp_path / "dev.json"
    dataset_file.write_text(json.dumps({"version": "2.0", "data": DATASET}), encoding="utf-8")
    prediction_file = tmp_path / "predictions.json"
    prediction_file.write_text(json.dumps({qid: "x" for qid in PREDICTIONS}), encoding="utf-8")
    assert evaluate.main([str(dataset_file), str(prediction_file)]) == 0
    captured = capsys.readouterr()
    assert "expects v-1.1, but got dataset with v-2.0" in captured.err
    assert json.loads(captured.out) == {"exact_match": 0.0, "f1": 0.0}


@pytest.mark.parametrize(
    ("name", "min_paragraphs", "min_questions"),
    [("train-v1.1-mini.json", 6, 40), ("dev-v1.1-mini.json", 3, 15)],
)
def test_mini_dataset_answers_are_exact_spans(name: str, min_paragraphs: int, min_questions: int):
    """Every answer_start must point at its text: the SQuAD features are built from these offsets."""
    dataset = json.loads((EXAMPLE_DIR / "data" / name).read_text(encoding="utf-8"))
    assert dataset["version"] == "1.1"
    paragraphs = [p for article in dataset["data"] for p in article["paragraphs"]]
    qas = [qa for p in paragraphs for qa in p["qas"]]
    assert len(paragraphs) >= min_paragraphs
    assert len(qas) >= min_questions
    assert len({qa["id"] for qa in qas}) == len(qas)
    for paragraph in paragraphs:
        context = paragraph["context"]
        assert len(context.split()) < 120
        for qa in paragraph["qas"]:
            assert qa["question"].endswith("?")
            assert qa["answers"]
            for answer in qa["answers"]:
                start = answer["answer_start"]
                assert context[start : start + len(answer["text"])] == answer["text"], qa["id"]
    # Gold answers as predictions score 100, which also exercises evaluate() on the real file layout.
    gold = {qa["id"]: qa["answers"][0]["text"] for qa in qas}
    assert evaluate.evaluate(dataset["data"], gold) == {"exact_match": 100.0, "f1": 100.0}


def test_train_and_dev_do_not_share_paragraphs():
    def contexts(name: str) -> set[str]:
        dataset = json.loads((EXAMPLE_DIR / "data" / name).read_text(encoding="utf-8"))
        return {p["context"] for article in dataset["data"] for p in article["paragraphs"]}

    assert not contexts("train-v1.1-mini.json") & contexts("dev-v1.1-mini.json")
