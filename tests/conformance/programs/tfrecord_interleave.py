"""TensorFlow's "TFRecord and tf.train.Example" + "tf.data: Build TensorFlow input pipelines": examples
written to TFRecord files, read back with list_files + interleave + map + batch, trained and evaluated."""

import numpy as np

from tests.conformance.harness import data

FAMILIES = ("keras2", "keras3-tf", "keras3-jax", "keras3-torch")
EXACT = (
    False  # files are read in an order that depends on the worker's share: compare ranks, not the reference
)
FILES = 4


def main(job):
    keras = job.keras
    import tensorflow as tf

    x, y = data(64, 3)
    if job.rank == 0:
        for part in range(FILES):
            with tf.io.TFRecordWriter(job.path(f"train-{part}.tfrecord")) as writer:
                for i in range(part, len(x), FILES):
                    feature = {
                        "x": tf.train.Feature(float_list=tf.train.FloatList(value=x[i])),
                        "y": tf.train.Feature(float_list=tf.train.FloatList(value=y[i])),
                    }
                    writer.write(
                        tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()
                    )
    _wait_for_files(job)
    spec = {"x": tf.io.FixedLenFeature([3], tf.float32), "y": tf.io.FixedLenFeature([1], tf.float32)}

    def parse(record):
        example = tf.io.parse_single_example(record, spec)
        return example["x"], example["y"]

    def dataset():
        files = tf.data.Dataset.list_files(job.path("train-*.tfrecord"), shuffle=False)
        records = files.interleave(tf.data.TFRecordDataset, cycle_length=2, deterministic=True)
        return records.map(parse).batch(job.batch(4))

    job.seed()
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(job.rate(0.05)), loss="mse", metrics=["mae"])
    model = job.distribute(model)
    model.fit(dataset(), epochs=2, verbose=0)
    job.record("evaluate_files", model.evaluate(dataset(), verbose=0))
    job.record("evaluate_arrays", model.evaluate(x, y, batch_size=job.batch(4), verbose=0))
    job.record("mae_of_predictions", float(np.mean(np.abs(model.predict(x, verbose=0) - y))))
    return model


def _wait_for_files(job):
    """Every rank reads the files the chief wrote (a shared folder, as on a cluster's file system)."""
    import time

    deadline = time.time() + 60
    while not all(_complete(job.path(f"train-{p}.tfrecord")) for p in range(FILES)):
        if time.time() > deadline:
            raise TimeoutError("the chief's TFRecord files did not appear")
        time.sleep(0.1)


def _complete(path):
    import os

    return os.path.exists(path) and os.path.getsize(path) > 0
