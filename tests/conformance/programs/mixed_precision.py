"""keras.io "Mixed precision": the mixed_float16 policy, a float32 output layer, compile's loss scaling."""

from tests.conformance.harness import classes

FAMILIES = ("keras2", "keras3-tf")
EXACT = True
TOLERANCE = 2e-3  # float16 compute: the same sums in another order round otherwise


def main(job):
    keras = job.keras
    x, y = classes(64, (6,), 3)
    keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        job.seed()
        inputs = keras.Input(shape=(6,))
        hidden = keras.layers.Dense(8, activation="relu")(inputs)
        outputs = keras.layers.Activation("softmax", dtype="float32")(keras.layers.Dense(3)(hidden))
        model = keras.Model(inputs, outputs)
        model.compile(
            loss="sparse_categorical_crossentropy",
            optimizer=keras.optimizers.SGD(job.rate(0.05)),
            metrics=["accuracy"],
        )
        model = job.distribute(model)
        model.fit(x, y, batch_size=job.batch(4), epochs=2, shuffle=False, verbose=0)
        job.record("evaluate", model.evaluate(x, y, verbose=0))
        job.record("compute_dtype", model.layers[1].compute_dtype)
    finally:
        keras.mixed_precision.set_global_policy("float32")
    return model
