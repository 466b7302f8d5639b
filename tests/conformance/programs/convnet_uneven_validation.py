"""keras.io "Image classification from scratch", small: Conv2D, BatchNormalization, MaxPooling2D, Flatten,
Dense, with validation data whose batches do not fill every replica at the last step (20 samples in
batches of 4 for 2 replicas: 5 batches), and an evaluate on 17 samples (parts of 9 and 8). kscale
evaluates every sample and must never hand a replica a batch of zero samples: TensorFlow's CPU conv2d
returns such a batch with its input's shape, and with oneDNN on an AVX-512/AMX CPU the matmul after the
pooling then fails. On TensorFlow, a tf.data validation set of 5 batches is evaluated too."""

from tests.conformance.harness import classes

FAMILIES = ("keras2", "keras3-tf", "keras3-jax", "keras3-torch")
EXACT = False  # BatchNormalization's moving statistics follow each worker's own batches


def main(job):
    keras = job.keras
    x, y = classes(64, (8, 8, 1), 2)
    vx, vy = classes(20, (8, 8, 1), 2, seed=1)
    job.seed()
    model = keras.Sequential(
        [
            keras.Input((8, 8, 1)),
            keras.layers.Conv2D(8, 3, padding="same"),
            keras.layers.BatchNormalization(),
            keras.layers.Activation("relu"),
            keras.layers.MaxPooling2D(2),
            keras.layers.Flatten(),
            keras.layers.Dense(2, activation="softmax"),
        ]
    )
    model.compile(
        optimizer=keras.optimizers.Adam(job.rate(1e-3)),
        loss="sparse_categorical_crossentropy",
        metrics=["accuracy"],
    )
    model = job.distribute(model)
    history = model.fit(x, y, batch_size=job.batch(4), epochs=2, validation_data=(vx, vy), verbose=0)
    job.record("val_loss", history.history["val_loss"])
    job.record("evaluate", model.evaluate(vx[:17], vy[:17], batch_size=job.batch(4), verbose=0))
    if job.family in ("keras2", "keras3-tf"):  # a tf.data input too
        import tensorflow as tf

        batches = tf.data.Dataset.from_tensor_slices((vx, vy)).batch(4)  # 5 batches, as the user batched
        job.record("evaluate_dataset", model.evaluate(batches, verbose=0))
    return model
