"""keras.io "GAN overriding Model.train_step": no call(); compile(d_optimizer, g_optimizer, loss_fn) of its
own signature; train_step updates the discriminator, then the generator, each with its own optimizer.

Both optimizers are averaged over workers and have their rates scaled (Horovod). Under a tf.distribute
strategy the model must be created in the strategy's scope, and its __init__ takes models, which Keras
cannot copy there from a config: kscale stops with a ModelError saying to create it inside
`with kscale.scope():` (where Keras 2 then asks for a loss reduction fit for tf.distribute)."""

import numpy as np

FAMILIES = ("keras2", "keras3-tf")
EXACT = True
LATENT = 3


def main(job):
    keras = job.keras
    import tensorflow as tf

    class GAN(keras.Model):
        def __init__(self, discriminator, generator, latent_dim):
            super().__init__()
            self.discriminator = discriminator
            self.generator = generator
            self.latent_dim = latent_dim
            self.d_loss_tracker = keras.metrics.Mean(name="d_loss")
            self.g_loss_tracker = keras.metrics.Mean(name="g_loss")

        def compile(self, d_optimizer, g_optimizer, loss_fn):
            super().compile()
            self.d_optimizer = d_optimizer
            self.g_optimizer = g_optimizer
            self.loss_fn = loss_fn

        @property
        def metrics(self):
            return [self.d_loss_tracker, self.g_loss_tracker]

        def train_step(self, batch):
            real, noise = batch  # the noise comes with the data: the same samples in every run
            generated = self.generator(noise)
            combined = tf.concat([generated, real], axis=0)
            size = tf.shape(real)[0]
            labels = tf.concat([tf.ones((size, 1)), tf.zeros((size, 1))], axis=0)
            with tf.GradientTape() as tape:
                d_loss = self.loss_fn(labels, self.discriminator(combined))
            grads = tape.gradient(d_loss, self.discriminator.trainable_weights)
            self.d_optimizer.apply_gradients(zip(grads, self.discriminator.trainable_weights))
            with tf.GradientTape() as tape:
                g_loss = self.loss_fn(tf.zeros((size, 1)), self.discriminator(self.generator(noise)))
            grads = tape.gradient(g_loss, self.generator.trainable_weights)
            self.g_optimizer.apply_gradients(zip(grads, self.generator.trainable_weights))
            self.d_loss_tracker.update_state(d_loss)
            self.g_loss_tracker.update_state(g_loss)
            return {"d_loss": self.d_loss_tracker.result(), "g_loss": self.g_loss_tracker.result()}

    rng = np.random.default_rng(0)
    real = rng.normal(loc=2.0, size=(64, 4)).astype("float32")
    noise = rng.normal(size=(64, LATENT)).astype("float32")
    job.seed()
    discriminator = keras.Sequential(
        [keras.Input((4,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(1)],
        name="discriminator",
    )
    generator = keras.Sequential([keras.Input((LATENT,)), keras.layers.Dense(4)], name="generator")
    gan = GAN(discriminator=discriminator, generator=generator, latent_dim=LATENT)
    gan.compile(
        d_optimizer=keras.optimizers.SGD(job.rate(0.01)),
        g_optimizer=keras.optimizers.SGD(job.rate(0.02)),
        loss_fn=keras.losses.BinaryCrossentropy(from_logits=True),
    )
    gan = job.distribute(gan)
    history = gan.fit(real, noise, batch_size=job.batch(4), epochs=2, shuffle=False, verbose=0)
    job.record("history", history.history)
    job.record(
        "iterations", [int(gan.d_optimizer.iterations.numpy()), int(gan.g_optimizer.iterations.numpy())]
    )
    return gan
