"""keras.io "Variational AutoEncoder": a VAE model whose __init__ takes an encoder and a decoder, with no
call(), whose own train_step samples z with the reparameterization trick (a Sampling layer drawing random
noise) and adds the reconstruction and KL losses, tracked by Mean metrics it keeps as attributes. The
noise is drawn per process, so it is not compared with one process; every rank must end with the same
model."""

import numpy as np

FAMILIES = ("keras2", "keras3-tf")
EXACT = False  # the Sampling layer's noise differs per process
LATENT = 2


def main(job):
    keras = job.keras
    import tensorflow as tf

    class Sampling(keras.layers.Layer):
        def call(self, inputs):
            z_mean, z_log_var = inputs
            epsilon = tf.random.normal(shape=tf.shape(z_mean))
            return z_mean + tf.exp(0.5 * z_log_var) * epsilon

    class VAE(keras.Model):
        def __init__(self, encoder, decoder, **kwargs):
            super().__init__(**kwargs)
            self.encoder = encoder
            self.decoder = decoder
            self.total_loss_tracker = keras.metrics.Mean(name="total_loss")
            self.reconstruction_loss_tracker = keras.metrics.Mean(name="reconstruction_loss")
            self.kl_loss_tracker = keras.metrics.Mean(name="kl_loss")

        @property
        def metrics(self):
            return [self.total_loss_tracker, self.reconstruction_loss_tracker, self.kl_loss_tracker]

        def train_step(self, data):
            with tf.GradientTape() as tape:
                z_mean, z_log_var, z = self.encoder(data)
                reconstruction = self.decoder(z)
                reconstruction_loss = tf.reduce_mean(
                    tf.reduce_sum(keras.losses.binary_crossentropy(data, reconstruction), axis=(1, 2))
                )
                kl_loss = -0.5 * (1 + z_log_var - tf.square(z_mean) - tf.exp(z_log_var))
                kl_loss = tf.reduce_mean(tf.reduce_sum(kl_loss, axis=1))
                total_loss = reconstruction_loss + kl_loss
            grads = tape.gradient(total_loss, self.trainable_weights)
            self.optimizer.apply_gradients(zip(grads, self.trainable_weights))
            self.total_loss_tracker.update_state(total_loss)
            self.reconstruction_loss_tracker.update_state(reconstruction_loss)
            self.kl_loss_tracker.update_state(kl_loss)
            return {
                "loss": self.total_loss_tracker.result(),
                "reconstruction_loss": self.reconstruction_loss_tracker.result(),
                "kl_loss": self.kl_loss_tracker.result(),
            }

    rng = np.random.default_rng(0)
    images = (rng.random((64, 6, 6, 1)) > 0.5).astype("float32")  # small binary "digits"
    job.seed()
    encoder_inputs = keras.Input(shape=(6, 6, 1))
    x = keras.layers.Conv2D(4, 3, activation="relu", strides=2, padding="same")(encoder_inputs)
    x = keras.layers.Flatten()(x)
    x = keras.layers.Dense(8, activation="relu")(x)
    z_mean = keras.layers.Dense(LATENT, name="z_mean")(x)
    z_log_var = keras.layers.Dense(LATENT, name="z_log_var")(x)
    z = Sampling()([z_mean, z_log_var])
    encoder = keras.Model(encoder_inputs, [z_mean, z_log_var, z], name="encoder")
    latent_inputs = keras.Input(shape=(LATENT,))
    x = keras.layers.Dense(3 * 3 * 4, activation="relu")(latent_inputs)
    x = keras.layers.Reshape((3, 3, 4))(x)
    decoder_outputs = keras.layers.Conv2DTranspose(1, 3, strides=2, activation="sigmoid", padding="same")(x)
    decoder = keras.Model(latent_inputs, decoder_outputs, name="decoder")
    vae = VAE(encoder, decoder)
    vae.compile(optimizer=keras.optimizers.Adam(job.rate(1e-3)))
    vae = job.distribute(vae)
    history = vae.fit(images, epochs=2, batch_size=job.batch(8), verbose=0)
    job.record("epochs", len(history.history["loss"]))
    return vae
