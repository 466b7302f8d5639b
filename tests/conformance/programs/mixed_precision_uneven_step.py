"""mixed_float16 on data the global batch does not divide (67 samples, a last step of 3), a model of two
outputs with loss_weights (the generator's seed 446 of C-tf). One process's last step scales the mean of 3
samples' losses; split 2 and 1 over the replicas, each replica's float16 backward pass carried its slice's
mean scaled by S/R, so the replica of one sample carried larger numbers than one process, the other
smaller: one process's dynamic loss scale overflowed at a step where kscale's did not (the scale ended at
2^15, one process's at 2^14: 0.09 off). Each replica's loss is now scaled by S times its share of the step
(kscale.step_weights.in_loss): the same steps are skipped, the scale and the weights are one process's."""

import numpy as np

from tests.conformance.harness import loss_scale

FAMILIES = ("keras2", "keras3-tf", "keras3-torch")
EXACT = True
TOLERANCE = 0.05  # float16 compute: the same sums in another order round otherwise
RELATIVE = True


def main(job):
    keras = job.keras
    rng = np.random.default_rng(446)
    x = rng.normal(size=(67, 6)).astype("float32")
    y = (x @ rng.normal(size=(6, 3))[:, :1] / np.sqrt(6) + 0.1).astype("float32")
    aux = rng.normal(size=(67, 3)).astype("float32")
    y_b = (aux @ rng.normal(size=(3, 3))).argmax(axis=1).astype("int32")
    keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        job.seed()
        main_in, aux_in = keras.Input((6,), name="main"), keras.Input((3,), name="aux")
        merged = keras.layers.Concatenate()([keras.layers.Dense(8, activation="tanh")(main_in), aux_in])
        out_a = keras.layers.Dense(1, name="out_a", dtype="float32")(merged)
        out_b = keras.layers.Dense(3, activation="softmax", name="out_b", dtype="float32")(merged)
        model = keras.Model({"main": main_in, "aux": aux_in}, {"out_a": out_a, "out_b": out_b})
        schedule = keras.optimizers.schedules.ExponentialDecay(job.rate(0.02), decay_steps=3, decay_rate=0.8)
        model.compile(
            optimizer=keras.optimizers.SGD(schedule, momentum=0.9),
            loss={"out_a": keras.losses.MeanSquaredError(), "out_b": "sparse_categorical_crossentropy"},
            loss_weights={"out_a": 1.0, "out_b": 0.5},
        )
        model = job.distribute(model)
        inputs, targets = {"main": x, "aux": aux}, {"out_a": y, "out_b": y_b}
        history = model.fit(inputs, targets, batch_size=job.batch(4), epochs=3, verbose=0)
        job.record("history", history.history)
        job.record("loss_scale", loss_scale(job, model.optimizer))
    finally:
        keras.mixed_precision.set_global_policy("float32")
    return model
