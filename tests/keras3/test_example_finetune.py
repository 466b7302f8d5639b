"""examples/keras3_finetune: the Keras 3 BERT encoder computes BERT, and fine-tuning with the one line learns."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import keras
import numpy as np
import pytest

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "keras3_finetune"
sys.path.insert(0, str(EXAMPLE))

from encoder import default_model_dir, pretrained_encoder  # noqa: E402


def numpy_bert(w: dict, config: dict, ids, segments, mask) -> np.ndarray:
    """BERT's forward pass written out in NumPy from HF's weight names: the independent reference."""

    def norm(x, prefix):
        mean = x.mean(-1, keepdims=True)
        var = ((x - mean) ** 2).mean(-1, keepdims=True)
        return (x - mean) / np.sqrt(var + config["layer_norm_eps"]) * w[f"{prefix}.weight"] + w[
            f"{prefix}.bias"
        ]

    def dense(x, prefix):
        return x @ w[f"{prefix}.weight"].T + w[f"{prefix}.bias"]

    erf = np.vectorize(math.erf)
    heads, hidden = config["num_attention_heads"], config["hidden_size"]
    x = (
        w["embeddings.word_embeddings.weight"][ids]
        + w["embeddings.position_embeddings.weight"][: ids.shape[1]]
    )
    x = norm(x + w["embeddings.token_type_embeddings.weight"][segments], "embeddings.LayerNorm")
    bias = (1.0 - mask)[:, None, None, :] * -1e9
    for i in range(config["num_hidden_layers"]):
        p = f"encoder.layer.{i}"

        def split(t):
            return t.reshape(t.shape[0], t.shape[1], heads, hidden // heads).transpose(0, 2, 1, 3)

        q, k, v = (split(dense(x, f"{p}.attention.self.{n}")) for n in ("query", "key", "value"))
        scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(hidden // heads) + bias
        probs = np.exp(scores - scores.max(-1, keepdims=True))
        probs /= probs.sum(-1, keepdims=True)
        context = (probs @ v).transpose(0, 2, 1, 3).reshape(x.shape)
        x = norm(x + dense(context, f"{p}.attention.output.dense"), f"{p}.attention.output.LayerNorm")
        inner = dense(x, f"{p}.intermediate.dense")
        x = norm(
            x + dense(0.5 * inner * (1.0 + erf(inner / math.sqrt(2.0))), f"{p}.output.dense"),
            f"{p}.output.LayerNorm",
        )
    return x


def test_the_keras_3_encoder_computes_what_bert_computes():
    from safetensors.numpy import load_file
    from tokenizers import Tokenizer

    model_dir = default_model_dir()
    config = json.loads((model_dir / "config.json").read_text())
    weights = {k: v.astype("float64") for k, v in load_file(str(model_dir / "model.safetensors")).items()}
    tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    tokenizer.enable_padding(length=16)
    encoded = tokenizer.encode_batch(["kscale scales keras training", "a short one"])
    ids = np.array([e.ids for e in encoded], "int32")
    segments = np.array([e.type_ids for e in encoded], "int32")
    mask = np.array([e.attention_mask for e in encoded], "int32")
    ours = keras.ops.convert_to_numpy(pretrained_encoder(model_dir, 16)([ids, segments, mask]))
    reference = numpy_bert(weights, config, ids, segments, mask.astype("float64"))
    real = mask.astype(bool)  # padding positions are not compared
    assert np.max(np.abs(ours[real] - reference[real])) < 1e-4


@pytest.mark.multiprocess
@pytest.mark.timeout(600)
def test_fine_tuning_with_the_one_line_learns_the_task():
    command = [sys.executable, "finetune.py", "--epochs", "4"]
    replicas = 1
    if keras.config.backend() == "jax":  # two JAX processes, as the README shows
        command = [str(Path(sys.executable).parent / "kscale"), "run", "-np", "2", "--", *command]
        replicas = 2
    done = subprocess.run(command, cwd=EXAMPLE, capture_output=True, text=True, timeout=540)
    assert done.returncode == 0, (done.stdout + done.stderr)[-5000:]
    line = next(line for line in done.stdout.splitlines() if "finetune result " in line)
    result = json.loads(line.split("finetune result ", 1)[1])
    assert result["replicas"] == replicas
    assert result["loss_last_epoch"] < result["loss_first_epoch"] / 4
    assert result["accuracy_after"] >= result["accuracy_before"] + 0.25  # held-out sentences
