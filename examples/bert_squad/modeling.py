"""BERT encoder as TF1-style graph code, so it runs inside a `tf.estimator` model_fn on TF 2.15.

Variables are created with `tf.compat.v1.get_variable` under the same scopes as the original
google-research/bert code (`bert/embeddings/...`, `bert/encoder/layer_N/...`, `bert/pooler/...`), so the
original checkpoints and the ones written by `convert_checkpoint.py` load by name. Keras layers are avoided
on purpose: their variable naming and their behaviour under `tf.compat.v1` graphs changed across releases.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import math
import re
from collections.abc import Callable
from typing import Any

import tensorflow as tf

_LAYER_NORM_EPSILON = 1e-12

# HF naming: "gelu" is the exact erf form; the tanh approximation (which google-research/bert calls
# "gelu") is "gelu_new" / "gelu_pytorch_tanh". We follow HF so converted HF models reproduce exactly.
_ERF_GELU_NAMES = ("gelu", "gelu_exact", "gelu_erf")
_TANH_GELU_NAMES = ("gelu_new", "gelu_tanh", "gelu_pytorch_tanh", "gelu_fast")


@dataclasses.dataclass(frozen=True)
class BertConfig:
    """BERT hyper-parameters; frozen because one config is shared by every graph built from it."""

    vocab_size: int
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    hidden_act: str = "gelu"
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    max_position_embeddings: int = 512
    type_vocab_size: int = 16
    initializer_range: float = 0.02

    def __post_init__(self) -> None:
        if self.hidden_size % self.num_attention_heads != 0:
            raise ValueError(
                f"hidden_size {self.hidden_size} is not a multiple of num_attention_heads "
                f"{self.num_attention_heads}: pick sizes where hidden_size % num_attention_heads == 0."
            )
        get_activation(self.hidden_act)  # fail at construction, not deep inside graph building

    @classmethod
    def from_dict(cls, json_object: dict[str, Any]) -> BertConfig:
        """Build a config from a dict; unknown keys (HF adds many, e.g. `model_type`) are ignored."""
        names = {f.name for f in dataclasses.fields(cls)}
        if "vocab_size" not in json_object:
            raise ValueError(f"BERT config has no 'vocab_size'; found keys {sorted(json_object)}.")
        return cls(**{k: v for k, v in json_object.items() if k in names})

    @classmethod
    def from_json_file(cls, json_file: str) -> BertConfig:
        """Read a `bert_config.json` (original BERT) or a HF `config.json`."""
        with tf.io.gfile.GFile(json_file, "r") as reader:
            return cls.from_dict(json.loads(reader.read()))

    @classmethod
    def tiny(cls, vocab_size: int) -> BertConfig:
        """A 2-layer, 32-wide config that builds and trains in seconds on CPU, for tests and smoke runs."""
        return cls(
            vocab_size=vocab_size,
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=2,
            intermediate_size=64,
            max_position_embeddings=256,
            type_vocab_size=2,
        )

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def to_json_string(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n"


class BertModel:
    """BERT encoder ("Bidirectional Encoder Representations from Transformers") built into the current graph.

    Example::

        config = BertConfig.tiny(vocab_size=100)
        model = BertModel(config, is_training=True, input_ids=ids, input_mask=mask, token_type_ids=types)
        sequence = model.get_sequence_output()  # [batch, seq, hidden]
    """

    def __init__(
        self,
        config: BertConfig,
        is_training: bool,
        input_ids: tf.Tensor,
        input_mask: tf.Tensor | None = None,
        token_type_ids: tf.Tensor | None = None,
        scope: str | None = None,
    ) -> None:
        if not is_training:
            config = dataclasses.replace(config, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)

        batch_size, seq_length = get_shape_list(input_ids, expected_rank=2)
        if input_mask is None:
            input_mask = tf.ones([batch_size, seq_length], dtype=tf.int32)
        if token_type_ids is None:
            token_type_ids = tf.zeros([batch_size, seq_length], dtype=tf.int32)

        with tf.compat.v1.variable_scope(scope, default_name="bert"):
            with tf.compat.v1.variable_scope("embeddings"):
                self.embedding_table = tf.compat.v1.get_variable(
                    "word_embeddings",
                    [config.vocab_size, config.hidden_size],
                    initializer=create_initializer(config.initializer_range),
                )
                word = tf.gather(self.embedding_table, input_ids)
                self.embedding_output = _embedding_postprocessor(word, token_type_ids, config)

            with tf.compat.v1.variable_scope("encoder"):
                attention_mask = _attention_mask_from_input_mask(input_ids, input_mask)
                self.all_encoder_layers = _transformer_encoder(self.embedding_output, attention_mask, config)
            self.sequence_output = self.all_encoder_layers[-1]

            with tf.compat.v1.variable_scope("pooler"):
                # The [CLS] vector, through one dense layer: what sentence-level heads were pre-trained on.
                first_token = tf.squeeze(self.sequence_output[:, 0:1, :], axis=1)
                self.pooled_output = _dense(
                    first_token, config.hidden_size, "dense", config.initializer_range, activation=tf.tanh
                )

    def get_pooled_output(self) -> tf.Tensor:
        """[batch, hidden]: the tanh-projected first-token vector."""
        return self.pooled_output

    def get_sequence_output(self) -> tf.Tensor:
        """[batch, seq, hidden]: the last encoder layer, the input of token-level heads such as SQuAD's."""
        return self.sequence_output

    def get_all_encoder_layers(self) -> list[tf.Tensor]:
        """Every encoder layer's output, [batch, seq, hidden] each, first layer first."""
        return self.all_encoder_layers

    def get_embedding_output(self) -> tf.Tensor:
        """[batch, seq, hidden]: word + position + token-type embeddings after LayerNorm and dropout."""
        return self.embedding_output

    def get_embedding_table(self) -> tf.Variable:
        return self.embedding_table


def gelu_exact(x: tf.Tensor) -> tf.Tensor:
    """GELU with the exact Gaussian CDF (HF's "gelu")."""
    return 0.5 * x * (1.0 + tf.math.erf(x / math.sqrt(2.0)))


def gelu_tanh(x: tf.Tensor) -> tf.Tensor:
    """GELU with the tanh approximation used by google-research/bert (HF's "gelu_new")."""
    return 0.5 * x * (1.0 + tf.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * tf.pow(x, 3))))


def get_activation(
    name: str | Callable[[tf.Tensor], tf.Tensor] | None,
) -> Callable[[tf.Tensor], tf.Tensor] | None:
    """Map an activation name from a config to a function; `None`/"linear" means no activation."""
    if name is None or callable(name):
        return name
    key = name.lower()
    if key in ("", "linear"):
        return None
    if key in _ERF_GELU_NAMES:
        return gelu_exact
    if key in _TANH_GELU_NAMES:
        return gelu_tanh
    if key == "relu":
        return tf.nn.relu
    if key == "tanh":
        return tf.tanh
    valid = ", ".join(sorted((*_ERF_GELU_NAMES, *_TANH_GELU_NAMES, "relu", "tanh", "linear")))
    raise ValueError(f"Unsupported hidden_act {name!r}; use one of: {valid}.")


def get_assignment_map_from_checkpoint(
    tvars: list[tf.Variable], init_checkpoint: str
) -> tuple[collections.OrderedDict[str, str], dict[str, int]]:
    """Match graph variables to checkpoint variables of the same name, for `init_from_checkpoint`.

    Returns the assignment map (checkpoint name -> graph variable name) and the set, as a dict, of graph
    variable names that the checkpoint will initialise (both with and without the ":0" suffix), so callers
    can log which variables start from the checkpoint and which (e.g. a new SQuAD head) start from scratch.
    """
    name_to_variable = collections.OrderedDict()
    for var in tvars:
        match = re.match(r"^(.*):\d+$", var.name)
        name = match.group(1) if match else var.name
        name_to_variable[name] = var

    assignment_map: collections.OrderedDict[str, str] = collections.OrderedDict()
    initialized_variable_names: dict[str, int] = {}
    for name, _shape in tf.train.list_variables(init_checkpoint):
        if name not in name_to_variable:
            continue
        assignment_map[name] = name
        initialized_variable_names[name] = 1
        initialized_variable_names[name + ":0"] = 1
    return assignment_map, initialized_variable_names


def create_initializer(initializer_range: float = 0.02) -> tf.compat.v1.truncated_normal_initializer:
    """Truncated normal, as BERT was pre-trained with."""
    return tf.compat.v1.truncated_normal_initializer(stddev=initializer_range)


def dropout(input_tensor: tf.Tensor, dropout_prob: float | None) -> tf.Tensor:
    """Dropout that is a no-op for a zero or missing probability (evaluation graphs)."""
    if not dropout_prob:
        return input_tensor
    return tf.nn.dropout(input_tensor, rate=dropout_prob)


def layer_norm(input_tensor: tf.Tensor, name: str | None = None) -> tf.Tensor:
    """LayerNorm over the last axis with variables `<name>/gamma` and `<name>/beta`, epsilon 1e-12."""
    with tf.compat.v1.variable_scope(name, default_name="LayerNorm"):
        width = input_tensor.shape[-1]
        gamma = tf.compat.v1.get_variable("gamma", [width], initializer=tf.compat.v1.ones_initializer())
        beta = tf.compat.v1.get_variable("beta", [width], initializer=tf.compat.v1.zeros_initializer())
        mean, variance = tf.nn.moments(input_tensor, axes=[-1], keepdims=True)
        normalized = (input_tensor - mean) * tf.math.rsqrt(variance + _LAYER_NORM_EPSILON)
        return normalized * gamma + beta


def get_shape_list(tensor: tf.Tensor, expected_rank: int | list[int] | None = None) -> list[Any]:
    """The tensor's shape as a list: Python ints where static, scalar tensors where only known at run time.

    Estimator input pipelines often leave the batch dimension unknown; this keeps every other dimension
    static so reshapes stay cheap and shape errors show at graph-building time.
    """
    if expected_rank is not None:
        allowed = {expected_rank} if isinstance(expected_rank, int) else set(expected_rank)
        if tensor.shape.ndims not in allowed:
            raise ValueError(
                f"Tensor {tensor.name} has rank {tensor.shape.ndims} (shape {tensor.shape}); "
                f"expected rank in {sorted(allowed)}."
            )
    shape = tensor.shape.as_list()
    dynamic = None
    for index, dim in enumerate(shape):
        if dim is None:
            if dynamic is None:
                dynamic = tf.shape(tensor)
            shape[index] = dynamic[index]
    return shape


def reshape_to_matrix(input_tensor: tf.Tensor) -> tf.Tensor:
    """[..., width] -> [N, width]: the encoder works on 2-D matrices so every dense layer is one matmul."""
    if input_tensor.shape.ndims == 2:
        return input_tensor
    width = input_tensor.shape[-1]
    return tf.reshape(input_tensor, [-1, width])


def _dense(
    input_tensor: tf.Tensor,
    units: int,
    name: str,
    initializer_range: float,
    activation: Callable[[tf.Tensor], tf.Tensor] | None = None,
) -> tf.Tensor:
    """A dense layer on a 2-D input with variables `<name>/kernel` [in, out] and `<name>/bias`."""
    with tf.compat.v1.variable_scope(name):
        kernel = tf.compat.v1.get_variable(
            "kernel", [input_tensor.shape[-1], units], initializer=create_initializer(initializer_range)
        )
        bias = tf.compat.v1.get_variable("bias", [units], initializer=tf.compat.v1.zeros_initializer())
        output = tf.nn.bias_add(tf.matmul(input_tensor, kernel), bias)
    return activation(output) if activation is not None else output


def _embedding_postprocessor(
    word_embeddings: tf.Tensor, token_type_ids: tf.Tensor, config: BertConfig
) -> tf.Tensor:
    """Add token-type and absolute position embeddings, then LayerNorm and dropout."""
    _, seq_length, width = get_shape_list(word_embeddings, expected_rank=3)
    token_type_table = tf.compat.v1.get_variable(
        "token_type_embeddings",
        [config.type_vocab_size, width],
        initializer=create_initializer(config.initializer_range),
    )
    output = word_embeddings + tf.gather(token_type_table, token_type_ids)

    if isinstance(seq_length, int) and seq_length > config.max_position_embeddings:
        raise ValueError(
            f"Sequence length {seq_length} exceeds max_position_embeddings {config.max_position_embeddings}; "
            "lower --max_seq_length or use a model with more positions."
        )
    position_table = tf.compat.v1.get_variable(
        "position_embeddings",
        [config.max_position_embeddings, width],
        initializer=create_initializer(config.initializer_range),
    )
    # [seq, width] broadcasts over the batch.
    output += tf.slice(position_table, [0, 0], [seq_length, -1])
    output = layer_norm(output, name="LayerNorm")
    return dropout(output, config.hidden_dropout_prob)


def _attention_mask_from_input_mask(input_ids: tf.Tensor, input_mask: tf.Tensor) -> tf.Tensor:
    """[batch, seq] key mask -> [batch, 1, 1, seq] float mask, broadcast over heads and query positions."""
    batch_size, seq_length = get_shape_list(input_ids, expected_rank=2)
    return tf.cast(tf.reshape(input_mask, [batch_size, 1, 1, seq_length]), tf.float32)


def _transformer_encoder(
    input_tensor: tf.Tensor, attention_mask: tf.Tensor, config: BertConfig
) -> list[tf.Tensor]:
    """Post-LayerNorm Transformer encoder (Vaswani et al. 2017) with BERT's variable layout."""
    batch_size, seq_length, hidden_size = get_shape_list(input_tensor, expected_rank=3)
    num_heads = config.num_attention_heads
    head_size = hidden_size // num_heads
    activation = get_activation(config.hidden_act)
    # Masked keys get a large negative score, so softmax gives them (numerically) zero weight.
    score_adder = (1.0 - attention_mask) * -10000.0

    def split_heads(matrix: tf.Tensor) -> tf.Tensor:
        tensor = tf.reshape(matrix, [batch_size, seq_length, num_heads, head_size])
        return tf.transpose(tensor, [0, 2, 1, 3])  # [batch, heads, seq, head_size]

    layer_input = reshape_to_matrix(input_tensor)
    all_layers = []
    for layer_index in range(config.num_hidden_layers):
        with tf.compat.v1.variable_scope(f"layer_{layer_index}"):
            with tf.compat.v1.variable_scope("attention"):
                with tf.compat.v1.variable_scope("self"):
                    query = split_heads(_dense(layer_input, hidden_size, "query", config.initializer_range))
                    key = split_heads(_dense(layer_input, hidden_size, "key", config.initializer_range))
                    value = split_heads(_dense(layer_input, hidden_size, "value", config.initializer_range))
                    scores = tf.matmul(query, key, transpose_b=True) * (1.0 / math.sqrt(head_size))
                    probs = dropout(tf.nn.softmax(scores + score_adder), config.attention_probs_dropout_prob)
                    context = tf.transpose(tf.matmul(probs, value), [0, 2, 1, 3])
                    context = tf.reshape(context, [-1, hidden_size])
                with tf.compat.v1.variable_scope("output"):
                    attention_output = _dense(context, hidden_size, "dense", config.initializer_range)
                    attention_output = dropout(attention_output, config.hidden_dropout_prob)
                    attention_output = layer_norm(attention_output + layer_input, name="LayerNorm")
            with tf.compat.v1.variable_scope("intermediate"):
                intermediate = _dense(
                    attention_output,
                    config.intermediate_size,
                    "dense",
                    config.initializer_range,
                    activation=activation,
                )
            with tf.compat.v1.variable_scope("output"):
                layer_output = _dense(intermediate, hidden_size, "dense", config.initializer_range)
                layer_output = dropout(layer_output, config.hidden_dropout_prob)
                layer_output = layer_norm(layer_output + attention_output, name="LayerNorm")
            layer_input = layer_output
            all_layers.append(tf.reshape(layer_output, [batch_size, seq_length, hidden_size]))
    return all_layers
