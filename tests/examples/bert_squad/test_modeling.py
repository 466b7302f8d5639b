"""BertConfig and BertModel graph construction: names that original checkpoints load by, shapes, dropout."""

from __future__ import annotations

import json
from pathlib import Path

import modeling
import numpy as np
import pytest
import tensorflow as tf


def original_bert_variable_names(num_layers: int) -> list[str]:
    """The variable names of google-research/bert checkpoints, written out by hand."""
    names = [
        "bert/embeddings/word_embeddings",
        "bert/embeddings/token_type_embeddings",
        "bert/embeddings/position_embeddings",
        "bert/embeddings/LayerNorm/gamma",
        "bert/embeddings/LayerNorm/beta",
    ]
    for n in range(num_layers):
        names += [
            f"bert/encoder/layer_{n}/attention/self/query/kernel",
            f"bert/encoder/layer_{n}/attention/self/query/bias",
            f"bert/encoder/layer_{n}/attention/self/key/kernel",
            f"bert/encoder/layer_{n}/attention/self/key/bias",
            f"bert/encoder/layer_{n}/attention/self/value/kernel",
            f"bert/encoder/layer_{n}/attention/self/value/bias",
            f"bert/encoder/layer_{n}/attention/output/dense/kernel",
            f"bert/encoder/layer_{n}/attention/output/dense/bias",
            f"bert/encoder/layer_{n}/attention/output/LayerNorm/gamma",
            f"bert/encoder/layer_{n}/attention/output/LayerNorm/beta",
            f"bert/encoder/layer_{n}/intermediate/dense/kernel",
            f"bert/encoder/layer_{n}/intermediate/dense/bias",
            f"bert/encoder/layer_{n}/output/dense/kernel",
            f"bert/encoder/layer_{n}/output/dense/bias",
            f"bert/encoder/layer_{n}/output/LayerNorm/gamma",
            f"bert/encoder/layer_{n}/output/LayerNorm/beta",
        ]
    return [*names, "bert/pooler/dense/kernel", "bert/pooler/dense/bias"]


def build(config: modeling.BertConfig, is_training: bool, seq_length: int = 8) -> tuple[tf.Graph, dict]:
    graph = tf.Graph()
    with graph.as_default():
        ids = tf.compat.v1.placeholder(tf.int32, [None, seq_length], name="ids")
        mask = tf.compat.v1.placeholder(tf.int32, [None, seq_length], name="mask")
        model = modeling.BertModel(config, is_training=is_training, input_ids=ids, input_mask=mask)
    return graph, {"ids": ids, "mask": mask, "model": model}


def test_variable_names_and_shapes_match_original_bert():
    config = modeling.BertConfig.tiny(vocab_size=50)
    graph, _ = build(config, is_training=True)
    with graph.as_default():
        variables = {v.name.removesuffix(":0"): v.shape.as_list() for v in tf.compat.v1.trainable_variables()}
    assert sorted(variables) == sorted(original_bert_variable_names(config.num_hidden_layers))
    assert variables["bert/embeddings/word_embeddings"] == [50, 32]
    assert variables["bert/embeddings/position_embeddings"] == [256, 32]
    assert variables["bert/encoder/layer_1/intermediate/dense/kernel"] == [32, 64]
    assert variables["bert/encoder/layer_1/output/dense/kernel"] == [64, 32]


def test_outputs_shapes_and_dropout():
    config = modeling.BertConfig.tiny(vocab_size=50)
    ids = np.random.default_rng(0).integers(0, 50, size=(3, 8)).astype(np.int32)
    mask = np.ones_like(ids)
    mask[1, 5:] = 0
    results = {}
    for is_training in (False, True):
        graph, t = build(config, is_training)
        model: modeling.BertModel = t["model"]
        assert len(model.get_all_encoder_layers()) == 2
        assert model.get_sequence_output() is model.get_all_encoder_layers()[-1]
        with graph.as_default(), tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            fetches = [model.get_sequence_output(), model.get_pooled_output(), model.get_embedding_output()]
            feed = {t["ids"]: ids, t["mask"]: mask}
            first, second = session.run(fetches, feed), session.run(fetches, feed)
        sequence, pooled, embedding = first
        assert sequence.shape == (3, 8, 32)
        assert pooled.shape == (3, 32)
        assert embedding.shape == (3, 8, 32)
        assert np.all(np.abs(pooled) <= 1.0)  # tanh
        results[is_training] = np.array_equal(first[0], second[0])
    assert results[False], "evaluation graphs must be deterministic (dropout off)"
    assert not results[True], "training graphs apply dropout"


def test_padding_does_not_change_unpadded_positions():
    """Keys masked out by input_mask get no attention, so extra padding leaves real tokens unchanged."""
    config = modeling.BertConfig.tiny(vocab_size=50)
    graph = tf.Graph()
    with graph.as_default():
        short = tf.constant([[2, 7, 9, 3]])
        long = tf.constant([[2, 7, 9, 3, 11, 12]])
        long_mask = tf.constant([[1, 1, 1, 1, 0, 0]])
        a = modeling.BertModel(config, False, short, scope="bert")
        with tf.compat.v1.variable_scope(tf.compat.v1.get_variable_scope(), reuse=True):
            b = modeling.BertModel(config, False, long, input_mask=long_mask, scope="bert")
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            short_out, long_out = session.run([a.get_sequence_output(), b.get_sequence_output()])
    np.testing.assert_allclose(short_out[0], long_out[0, :4], atol=1e-5)


def test_assignment_map_covers_only_what_the_checkpoint_has(tmp_path: Path):
    config = modeling.BertConfig.tiny(vocab_size=30)
    graph, _ = build(config, is_training=False)
    with graph.as_default():
        encoder_vars = [v for v in tf.compat.v1.global_variables() if "pooler" not in v.name]
        saver = tf.compat.v1.train.Saver(var_list=encoder_vars)
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            checkpoint = saver.save(session, str(tmp_path / "model.ckpt"))
        # A SQuAD-style head that no pre-trained checkpoint has.
        tf.compat.v1.get_variable("cls/squad/output_weights", [2, 32])
        tvars = tf.compat.v1.trainable_variables()
    assignment_map, initialized = modeling.get_assignment_map_from_checkpoint(tvars, checkpoint)
    assert len(assignment_map) == len(encoder_vars)
    assert all(key == value for key, value in assignment_map.items())
    assert "bert/embeddings/word_embeddings" in initialized
    assert "bert/embeddings/word_embeddings:0" in initialized
    assert "bert/pooler/dense/kernel" not in initialized
    assert "cls/squad/output_weights" not in initialized


def test_config_round_trip_and_hf_keys(tmp_path: Path):
    config = modeling.BertConfig.tiny(vocab_size=99)
    assert modeling.BertConfig.from_dict(json.loads(config.to_json_string())) == config
    hf = {
        "vocab_size": 10,
        "hidden_size": 8,
        "num_attention_heads": 2,
        "model_type": "bert",
        "pad_token_id": 0,
    }
    path = tmp_path / "config.json"
    path.write_text(json.dumps(hf), encoding="utf-8")
    loaded = modeling.BertConfig.from_json_file(str(path))
    assert (loaded.vocab_size, loaded.hidden_size, loaded.hidden_act) == (10, 8, "gelu")
    with pytest.raises(ValueError, match="vocab_size"):
        modeling.BertConfig.from_dict({"hidden_size": 8})
    with pytest.raises(ValueError, match="multiple of num_attention_heads"):
        modeling.BertConfig(vocab_size=10, hidden_size=10, num_attention_heads=3)
    with pytest.raises(ValueError, match="Unsupported hidden_act 'swish'"):
        modeling.BertConfig(vocab_size=10, hidden_act="swish")


def test_activations():
    x = tf.constant([-3.0, -1.0, 0.0, 0.5, 2.0])
    exact = modeling.get_activation("gelu")(x).numpy()
    approximate = modeling.get_activation("gelu_new")(x).numpy()
    # Phi(1) = 0.8413447..., so gelu(-1) = -1 * (1 - Phi(1)) and gelu(2) = 2 * Phi(2) = 2 * 0.9772499...
    np.testing.assert_allclose(exact[[1, 2, 4]], [-0.1586553, 0.0, 1.9544997], atol=1e-6)
    np.testing.assert_allclose(approximate, exact, atol=1e-3)
    assert np.abs(approximate - exact).max() > 1e-5
    assert modeling.get_activation("gelu_tanh") is modeling.get_activation("gelu_new")
    assert modeling.get_activation("linear") is None
    assert modeling.get_activation("relu") is tf.nn.relu


def test_sequence_longer_than_position_table_is_refused():
    config = modeling.BertConfig.tiny(vocab_size=10)
    with tf.Graph().as_default(), pytest.raises(ValueError, match="exceeds max_position_embeddings 256"):
        modeling.BertModel(config, False, tf.zeros([1, 300], tf.int32))


def test_get_shape_list_mixes_static_and_dynamic():
    with tf.Graph().as_default():
        tensor = tf.compat.v1.placeholder(tf.float32, [None, 5, 7])
        batch, length, width = modeling.get_shape_list(tensor, expected_rank=3)
        assert isinstance(batch, tf.Tensor)
        assert (length, width) == (5, 7)
        with pytest.raises(ValueError, match="expected rank in \\[2\\]"):
            modeling.get_shape_list(tensor, expected_rank=2)


def test_every_variable_gets_a_gradient():
    """Fine-tuning updates every variable: none may be cut off from the loss (e.g. by an integer cast)."""
    config = modeling.BertConfig.tiny(vocab_size=20)
    graph, t = build(config, is_training=True)
    with graph.as_default():
        model: modeling.BertModel = t["model"]
        loss = tf.reduce_sum(model.get_sequence_output()) + tf.reduce_sum(model.get_pooled_output())
        tvars = tf.compat.v1.trainable_variables()
        grads = tf.compat.v1.gradients(loss, tvars)
    missing = [v.name for v, g in zip(tvars, grads) if g is None]
    assert missing == []
