"""keras.io "Image classification from scratch": a folder of image files, one subfolder per class, read by
`image_dataset_from_directory(validation_split=0.2, subset="both", seed=1337)`; random flips and rotations
applied in the tf.data pipeline (`train_ds.map(lambda img, label: (data_augmentation(img), label))`, on the
CPU, as the example recommends), `Rescaling` in the model, a small convnet with BatchNormalization, fit with
validation and a `ModelCheckpoint` of every epoch. Augmentation is random per process: ranks compared."""

import os
import tempfile

import numpy as np

FAMILIES = ("keras2", "keras3-tf")
EXACT = False


def write_images(directory: str, per_class: int = 20, size: int = 16) -> None:
    """Two classes of PNG files (bright upper half, or bright lower half), the same on every rank."""
    import tensorflow as tf

    rng = np.random.default_rng(0)
    for label, name in enumerate(["Cat", "Dog"]):
        os.makedirs(os.path.join(directory, name), exist_ok=True)
        for i in range(per_class):
            image = rng.integers(0, 80, size=(size, size, 3))
            rows = slice(0, size // 2) if label == 0 else slice(size // 2, size)
            image[rows] += 150
            png = tf.io.encode_png(image.astype("uint8"))
            tf.io.write_file(os.path.join(directory, name, f"{i}.png"), png)


def main(job):
    keras = job.keras
    folder = tempfile.mkdtemp(prefix="kscale-images-")  # this process's own copy of the input files
    write_images(folder)
    image_size = (16, 16)
    train_ds, val_ds = keras.utils.image_dataset_from_directory(
        folder,
        validation_split=0.2,
        subset="both",
        seed=1337,
        image_size=image_size,
        batch_size=job.batch(4),
    )
    data_augmentation = keras.Sequential(
        [keras.layers.RandomFlip("horizontal"), keras.layers.RandomRotation(0.1)]
    )
    import tensorflow as tf

    train_ds = train_ds.map(
        lambda img, label: (data_augmentation(img), label), num_parallel_calls=tf.data.AUTOTUNE
    )
    train_ds = train_ds.prefetch(tf.data.AUTOTUNE)
    val_ds = val_ds.prefetch(tf.data.AUTOTUNE)

    job.seed()
    inputs = keras.Input(shape=(*image_size, 3))
    x = keras.layers.Rescaling(1.0 / 255)(inputs)
    x = keras.layers.Conv2D(8, 3, strides=2, padding="same")(x)
    x = keras.layers.BatchNormalization()(x)
    x = keras.layers.Activation("relu")(x)
    x = keras.layers.GlobalAveragePooling2D()(x)
    outputs = keras.layers.Dense(1, activation=None)(x)
    model = keras.Model(inputs, outputs)
    model.compile(
        optimizer=keras.optimizers.Adam(job.rate(3e-3)),
        loss=keras.losses.BinaryCrossentropy(from_logits=True),
        metrics=[keras.metrics.BinaryAccuracy(name="acc")],
    )
    model = job.distribute(model)
    suffix = ".keras" if hasattr(keras, "ops") else ".h5"
    callbacks = [keras.callbacks.ModelCheckpoint(job.path("save_at_{epoch}" + suffix))]
    history = model.fit(train_ds, epochs=2, callbacks=callbacks, validation_data=val_ds, verbose=0)
    job.record("history", history.history)
    job.record("evaluate", model.evaluate(val_ds, verbose=0))
    reloaded = keras.models.load_model(job.path("save_at_2" + suffix))
    job.record("reloaded_predict", reloaded.predict(np.zeros((2, 16, 16, 3), "float32"), verbose=0))
    return model
