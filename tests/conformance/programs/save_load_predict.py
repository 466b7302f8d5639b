"""keras.io "Save, serialize, and export models": fit, model.save("model.keras"), keras.models.load_model,
predict with the loaded model."""

from tests.conformance.harness import data

FAMILIES = ("keras2", "keras3-tf", "keras3-jax", "keras3-torch")
EXACT = True


def main(job):
    keras = job.keras
    x, y = data(64, 4)
    job.seed()
    model = keras.Sequential(
        [keras.Input((4,)), keras.layers.Dense(6, activation="relu"), keras.layers.Dense(1)]
    )
    model.compile(optimizer=keras.optimizers.Adam(job.rate(0.01)), loss="mse")
    model = job.distribute(model)
    model.fit(x, y, batch_size=job.batch(4), epochs=2, shuffle=False, verbose=0)
    model.save(job.path("model.keras"))
    loaded = keras.models.load_model(job.path("model.keras"))
    job.record("predict_loaded", loaded.predict(x, verbose=0))
    job.record("predict_trained", model.predict(x, verbose=0))
    job.record("loaded_rate", float(loaded.optimizer.learning_rate.numpy()) / job.rate(1.0))
    return model
