"""keras.io "Timeseries classification from scratch" (FordA): a fully convolutional network (three Conv1D
blocks with BatchNormalization and ReLU, global average pooling, softmax), fit on arrays with
`validation_split=0.2`, the example's callbacks (`ModelCheckpoint("best_model.keras", save_best_only=True,
monitor="val_loss")`, `ReduceLROnPlateau(monitor="val_loss", factor=0.5, patience, min_lr=0.0001)`,
`EarlyStopping`), then `keras.models.load_model("best_model.keras")` and evaluate on the test set, as the
example does. The plateau's rate cuts and the best checkpoint follow val_loss, the same on every rank.
BatchNormalization normalizes each replica's own batch: ranks compared, not one process."""

import numpy as np

FAMILIES = ("keras2", "keras3-tf", "keras3-jax", "keras3-torch")
EXACT = False


def readings(samples: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """FordA-shaped: one sensor over time, two classes told apart by a frequency, noisy."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, samples)
    t = np.linspace(0, 1, 40)
    x = np.sin(2 * np.pi * (3 + 2 * y[:, None]) * t) + rng.normal(0, 0.8, (samples, 40))
    return x.reshape(samples, 40, 1).astype("float32"), y.astype("int32")


def main(job):
    keras = job.keras
    x_train, y_train = readings(96, 0)
    x_test, y_test = readings(30, 1)

    def make_model(input_shape):
        input_layer = keras.layers.Input(input_shape)
        conv = input_layer
        for _ in range(3):
            conv = keras.layers.Conv1D(filters=8, kernel_size=3, padding="same")(conv)
            conv = keras.layers.BatchNormalization()(conv)
            conv = keras.layers.ReLU()(conv)
        gap = keras.layers.GlobalAveragePooling1D()(conv)
        output_layer = keras.layers.Dense(2, activation="softmax")(gap)
        return keras.models.Model(inputs=input_layer, outputs=output_layer)

    job.seed()
    model = make_model(input_shape=x_train.shape[1:])
    callbacks = [
        keras.callbacks.ModelCheckpoint(
            job.path("best_model.keras"), save_best_only=True, monitor="val_loss"
        ),
        keras.callbacks.ReduceLROnPlateau(monitor="val_loss", factor=0.5, patience=1, min_lr=0.0001),
        keras.callbacks.EarlyStopping(monitor="val_loss", patience=3, verbose=0),
    ]
    model.compile(
        optimizer=keras.optimizers.Adam(job.rate(0.01)),
        loss="sparse_categorical_crossentropy",
        metrics=["sparse_categorical_accuracy"],
    )
    model = job.distribute(model)
    history = model.fit(
        x_train,
        y_train,
        batch_size=job.batch(8),
        epochs=6,
        callbacks=callbacks,
        validation_split=0.2,
        verbose=0,
    )
    job.record("history", history.history)
    model = keras.models.load_model(job.path("best_model.keras"))
    job.record("test", model.evaluate(x_test, y_test, verbose=0))
    return model
