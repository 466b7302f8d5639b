"""Keras 3 on torch, fed as torch users feed it: `fit` and `evaluate` take `torch.utils.data.DataLoader`s
over a map-style Dataset (keras.io's torch guides). kscale gives each process every N-th batch of the
loader. The validation loader's 7 batches split unevenly and are evaluated exactly.
(torch_dataloader_shuffled: one that shuffles.)"""

import numpy as np

from tests.conformance.harness import data

FAMILIES = ("keras3-torch",)
EXACT = True


def main(job):
    keras = job.keras
    import torch

    class Pairs(torch.utils.data.Dataset):
        def __init__(self, x, y):
            self.x, self.y = x, y

        def __len__(self):
            return len(self.x)

        def __getitem__(self, i):
            return torch.from_numpy(self.x[i]), torch.from_numpy(self.y[i])

    x, y = data(64, 5)
    vx, vy = data(26, 5, seed=7)
    train = torch.utils.data.DataLoader(Pairs(x, y), batch_size=job.batch(4), shuffle=False)
    validation = torch.utils.data.DataLoader(Pairs(vx, vy), batch_size=4)  # 7 batches, the last of 2
    job.seed()
    model = keras.Sequential(
        [keras.Input((5,)), keras.layers.Dense(8, activation="tanh"), keras.layers.Dense(1)]
    )
    model.compile(optimizer=keras.optimizers.SGD(job.rate(0.05)), loss="mse", metrics=["mae"])
    model = job.distribute(model)
    history = model.fit(train, epochs=2, validation_data=validation, verbose=0)
    job.record("history", history.history)
    job.record("evaluate", model.evaluate(validation, verbose=0, return_dict=True))
    job.record("iterations", int(np.asarray(model.optimizer.iterations)))
    return model
