"""mixed_float16 whose loss scale overflows, as keras.io's "Mixed precision" guide sets it up: compile wraps
the optimizer in a LossScaleOptimizer with a dynamic scale (2^15 at first), which skips a step whose float16
gradients are not finite and halves the scale. Large targets make the first steps overflow. One process
overflows where its global batch's backward pass does; each replica computed its slice's mean loss, so its
float16 gradients were R times one process's and overflowed at other steps (here the scale ended at 2^7,
one process's at 2^8: 0.055 off; the generator's seeds 16 and 45: the scale halved at step 3 instead of 11,
0.024 and 0.11 off; all exact in float32). The scale after training and the weights are one process's.
Not reproduced: an overflow of a sum over the global batch (a kernel's gradient) that no replica's half
reaches (docs/guide/what-works.md)."""

from tests.conformance.harness import data, loss_scale

FAMILIES = ("keras2", "keras3-tf")
EXACT = True
TOLERANCE = 2e-3  # float16 compute: the same sums in another order round otherwise
RELATIVE = True


def main(job):
    keras = job.keras
    x, y = data(64, 6, seed=3)
    y = 60.0 * y  # the scale halves from 2^15 to 2^8 in the first steps
    keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        job.seed()
        model = keras.Sequential(
            [
                keras.Input((6,)),
                keras.layers.Dense(16, activation="relu"),
                keras.layers.Dense(1, dtype="float32"),
            ]
        )
        model.compile(loss="mse", optimizer=keras.optimizers.Adam(job.rate(0.01)))
        model = job.distribute(model)
        history = model.fit(x, y, batch_size=job.batch(4), epochs=2, shuffle=False, verbose=0)
        job.record("history", history.history)
        job.record("loss_scale", loss_scale(job, model.optimizer))
    finally:
        keras.mixed_precision.set_global_policy("float32")
    return model
