"""keras.io "Text classification with Transformer": a Functional model made of two layers of its own
(TokenAndPositionEmbedding, TransformerBlock: MultiHeadAttention, LayerNormalization, a feed-forward
Sequential, dropout), whose __init__ takes arguments their get_config does not return, so Keras cannot
copy the model from its config; integer token sequences, validation data, dropout as in the example
(ranks compared, and evaluate without dropout)."""

import numpy as np

FAMILIES = ("keras2", "keras3-tf", "keras3-jax", "keras3-torch")
EXACT = False  # dropout draws per process
#: One process on several JAX devices: the model, built before any distribution (`import kscale` sets none
#: there), is rebuilt from its config, which its custom layer's get_config cannot give.
EXPECT_ERROR_UNDER = {"jax_devices": "ModelError: cloning model"}

VOCAB, MAXLEN = 50, 20


def tokens(samples: int, seed: int) -> tuple:
    """Sequences of token ids; the label says whether token 5 appears more often than token 7."""
    rng = np.random.default_rng(seed)
    x = rng.integers(0, VOCAB, size=(samples, MAXLEN)).astype("int32")
    y = ((x == 5).sum(axis=1) > (x == 7).sum(axis=1)).astype("int32")
    return x, y


def main(job):
    keras = job.keras
    layers = keras.layers
    if job.family == "keras2":
        import tensorflow as tf

        shape_of, arange = tf.shape, tf.range
    else:
        shape_of, arange = keras.ops.shape, keras.ops.arange

    class TransformerBlock(layers.Layer):
        def __init__(self, embed_dim, num_heads, ff_dim, rate=0.1):
            super().__init__()
            self.att = layers.MultiHeadAttention(num_heads=num_heads, key_dim=embed_dim)
            self.ffn = keras.Sequential([layers.Dense(ff_dim, activation="relu"), layers.Dense(embed_dim)])
            self.layernorm1 = layers.LayerNormalization(epsilon=1e-6)
            self.layernorm2 = layers.LayerNormalization(epsilon=1e-6)
            self.dropout1 = layers.Dropout(rate)
            self.dropout2 = layers.Dropout(rate)

        def call(self, inputs, training=False):
            attn_output = self.att(inputs, inputs)
            attn_output = self.dropout1(attn_output, training=training)
            out1 = self.layernorm1(inputs + attn_output)
            ffn_output = self.ffn(out1)
            ffn_output = self.dropout2(ffn_output, training=training)
            return self.layernorm2(out1 + ffn_output)

    class TokenAndPositionEmbedding(layers.Layer):
        def __init__(self, maxlen, vocab_size, embed_dim):
            super().__init__()
            self.token_emb = layers.Embedding(input_dim=vocab_size, output_dim=embed_dim)
            self.pos_emb = layers.Embedding(input_dim=maxlen, output_dim=embed_dim)

        def call(self, x):
            maxlen = shape_of(x)[-1]
            positions = self.pos_emb(arange(0, maxlen, 1))
            return self.token_emb(x) + positions

    x, y = tokens(128, 0)
    vx, vy = tokens(40, 1)
    job.seed()
    inputs = layers.Input(shape=(MAXLEN,))
    hidden = TokenAndPositionEmbedding(MAXLEN, VOCAB, 16)(inputs)
    hidden = TransformerBlock(16, 2, 16)(hidden)
    hidden = layers.GlobalAveragePooling1D()(hidden)
    hidden = layers.Dropout(0.1)(hidden)
    hidden = layers.Dense(20, activation="relu")(hidden)
    hidden = layers.Dropout(0.1)(hidden)
    outputs = layers.Dense(2, activation="softmax")(hidden)
    model = keras.Model(inputs=inputs, outputs=outputs)
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    model = job.distribute(model)
    history = model.fit(x, y, batch_size=job.batch(16), epochs=2, validation_data=(vx, vy), verbose=0)
    job.record("history", history.history)
    job.record("evaluate", model.evaluate(vx, vy, verbose=0, return_dict=True))
    return model
