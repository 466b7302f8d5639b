"""keras.io's GAN (gan_two_optimizers) as its user changes it after kscale's ModelError under a tf.distribute
backend: created inside `with kscale.scope():`, and, as Keras 2 then asks of a loss in a train_step of
one's own, per-example losses (reduction "none") averaged over the global batch with
`tf.nn.compute_average_loss`, the way TensorFlow's custom-training tutorial does. Both optimizers averaged
and scaled; one process at the global batch gets the same weights."""

import numpy as np

FAMILIES = ("keras2", "keras3-tf")
# Keras 3 builds a model under a tf.distribute strategy by calling it, and this one has no call()
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
            with tf.GradientTape() as tape:  # per-example losses, averaged over the global batch
                d_loss = tf.nn.compute_average_loss(self.loss_fn(labels, self.discriminator(combined)))
            grads = tape.gradient(d_loss, self.discriminator.trainable_weights)
            self.d_optimizer.apply_gradients(zip(grads, self.discriminator.trainable_weights))
            with tf.GradientTape() as tape:
                fake = self.discriminator(self.generator(noise))
                g_loss = tf.nn.compute_average_loss(self.loss_fn(tf.zeros((size, 1)), fake))
            grads = tape.gradient(g_loss, self.generator.trainable_weights)
            self.g_optimizer.apply_gradients(zip(grads, self.generator.trainable_weights))
            self.d_loss_tracker.update_state(d_loss)
            self.g_loss_tracker.update_state(g_loss)
            return {"d_loss": self.d_loss_tracker.result(), "g_loss": self.g_loss_tracker.result()}

    rng = np.random.default_rng(0)
    real = rng.normal(loc=2.0, size=(64, 4)).astype("float32")
    noise = rng.normal(size=(64, LATENT)).astype("float32")
    with job.scope():  # what kscale's ModelError says to do with this model under a tf.distribute backend
        # Seeded once in the scope: entering it starts the backend, and starting Horovod under tf_keras
        # 2.18 draws TensorFlow op seeds, so a seed set before would give other initial weights than one
        # process's (the chief's are broadcast either way: the ranks agree).
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
            loss_fn=keras.losses.BinaryCrossentropy(from_logits=True, reduction="none"),
        )
    gan = job.distribute(gan)
    # Its logged losses are each replica's share of the global mean (half of it on 2 replicas), as under a
    # tf.distribute strategy without kscale: the weights are compared, not the log.
    gan.fit(real, noise, batch_size=job.batch(4), epochs=2, shuffle=False, verbose=0)
    job.record(
        "iterations", [int(gan.d_optimizer.iterations.numpy()), int(gan.g_optimizer.iterations.numpy())]
    )
    return gan
