"""keras.io "Timeseries forecasting for weather prediction": features normalized with the training split's
mean and standard deviation, `timeseries_dataset_from_array(sequence_length, sampling_rate, batch_size)` for
training and validation, an LSTM regressor, `ModelCheckpoint(save_weights_only=True, save_best_only=True,
monitor="val_loss")` and `EarlyStopping(monitor="val_loss", patience=5)`; then the best weights loaded
back with `load_weights` and used to predict, as the example does.

The training windows (278) leave a last batch of 22 at the global batch of 32, which one process
averages its loss over. At 16 per replica the dataset's last two batches are 16 and 6: kscale joins them
and gives each replica 11 (Keras' MirroredStrategy and Horovod average a mean over 16 with one over 6)."""

import numpy as np

FAMILIES = ("keras2", "keras3-tf")
EXACT = True


def weather(steps: int = 400, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(steps, dtype="float32")
    temperature = 10 + 8 * np.sin(2 * np.pi * t / 48) + rng.normal(0, 0.5, steps)
    pressure = 1000 + 5 * np.cos(2 * np.pi * t / 96) + rng.normal(0, 0.5, steps)
    humidity = 60 - 2 * temperature / 8 + rng.normal(0, 1.0, steps)
    return np.stack([temperature, pressure, humidity], axis=1).astype("float32")


def main(job):
    keras = job.keras
    features = weather()
    train_split = 300
    mean = features[:train_split].mean(axis=0)
    std = features[:train_split].std(axis=0)
    features = (features - mean) / std
    past, future, step, sequence_length = 24, 4, 2, 12
    x_train = features[:train_split]
    y_train = features[past + future : train_split + past + future, :1]
    x_val = features[train_split : len(features) - past - future]
    y_val = features[train_split + past + future :, :1]

    dataset_train = keras.utils.timeseries_dataset_from_array(
        x_train, y_train, sequence_length=sequence_length, sampling_rate=step, batch_size=job.batch(16)
    )
    dataset_val = keras.utils.timeseries_dataset_from_array(
        x_val, y_val, sequence_length=sequence_length, sampling_rate=step, batch_size=job.batch(16)
    )

    job.seed()
    inputs = keras.layers.Input(shape=(sequence_length, 3))
    lstm_out = keras.layers.LSTM(8)(inputs)
    outputs = keras.layers.Dense(1)(lstm_out)
    model = keras.Model(inputs=inputs, outputs=outputs)
    model.compile(optimizer=keras.optimizers.Adam(learning_rate=job.rate(0.005)), loss="mse")
    model = job.distribute(model)

    # The example's file: HDF5 weights in its tf.keras version, `.weights.h5` in its Keras 3 version
    path_checkpoint = job.path(
        "model_checkpoint.weights.h5" if hasattr(keras, "ops") else "model_checkpoint.h5"
    )
    es_callback = keras.callbacks.EarlyStopping(monitor="val_loss", min_delta=0, patience=5)
    modelckpt_callback = keras.callbacks.ModelCheckpoint(
        monitor="val_loss", filepath=path_checkpoint, verbose=0, save_weights_only=True, save_best_only=True
    )
    history = model.fit(
        dataset_train,
        epochs=3,
        validation_data=dataset_val,
        callbacks=[es_callback, modelckpt_callback],
        verbose=0,
    )
    job.record("history", history.history)
    model.load_weights(path_checkpoint)
    for x, _ in dataset_val.take(1):
        job.record("predict", model.predict(x[:16], verbose=0))  # the batch is 32 in the reference
    job.record("evaluate", model.evaluate(dataset_val, verbose=0))
    return model
