"""The seeds' Keras model, trained only to time it: pairs per second of its training steps; prints one JSON line.

dupq-lab train-speed --keras runs this in a child process (TensorFlow and PyTorch never share a
process's threads) on the duplicate pairs dupq's seed recipe trains on, so the two rates come from
one run on one machine. The model is the one the seeds build, rebuilt here:

* a ``TextVectorization`` layer (whitespace split, lower case, punctuation stripped) adapted on the
  pairs' questions, inside the model, so each step turns strings into ids as the seeds' does;
* one branch shared by both questions: embedding (128) -> LSTM (128, every step's output) ->
  ``GlobalAveragePooling1D`` -> L2 normalisation; the two branches' outputs concatenated;
* the triplet loss with hard negative mining (the mean negative and the closest negative below the
  positive, margin 0.25), Adam at 0.01, batches of 256 shuffled duplicate pairs, ``model.fit``.

The rate is the median over ``--repeats`` windows of ``--steps`` steps, after 10 warm-up steps, as
train_speed.py measures dupq's recipes.

    dupq-lab keras-seed PAIRS.tsv [--steps 200] [--repeats 3] [--threads 2]

PAIRS.tsv: one duplicate pair per line, the two questions separated by a tab. Needs TensorFlow
(``pip install -e ".[keras]"``).
"""

from __future__ import annotations

import os
import statistics
import time
from pathlib import Path
from typing import Annotated

import typer

from dupq_lab.options import Threads, report

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # TensorFlow's start-up chatter stays off stdout's one line
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

MARGIN = 0.25
BATCH = 256
DIM = 128
WARMUP = 10


def triplet_loss(_, both):
    """The seeds' objective on one batch: ``both`` is (B, 2*D), question 1's vectors then question 2's."""
    import tensorflow as tf

    v1, v2 = both[:, :DIM], both[:, DIM:]
    scores = tf.matmul(v2, v1, transpose_b=True)  # (B, B): row i, column j = cos(q2_i, q1_j)
    size = tf.shape(v1)[0]
    positive = tf.linalg.diag_part(scores)
    negatives = scores - tf.linalg.diag(positive)
    mean_negative = tf.reduce_sum(negatives, axis=1) / tf.cast(size - 1, scores.dtype)
    # the closest negative: the highest score off the diagonal that stays below the row's positive
    excluded = tf.logical_or(tf.eye(size) == 1, negatives > tf.expand_dims(positive, 1))
    closest_negative = tf.reduce_max(scores - 2.0 * tf.cast(excluded, scores.dtype), axis=1)
    hinge_mean = tf.maximum(mean_negative - positive + MARGIN, 0.0)
    hinge_closest = tf.maximum(closest_negative - positive + MARGIN, 0.0)
    return tf.reduce_sum(hinge_mean + hinge_closest)


def siamese(questions: list[str]):
    """The seeds' two-input model over one shared branch, its vectoriser adapted on ``questions``."""
    import keras
    import tensorflow as tf

    vectorizer = keras.layers.TextVectorization(output_mode="int", split="whitespace")
    vectorizer.adapt(tf.data.Dataset.from_tensor_slices(questions).batch(4096))
    branch = keras.Sequential(
        [
            vectorizer,
            keras.layers.Embedding(vectorizer.vocabulary_size(), DIM),
            keras.layers.LSTM(DIM, return_sequences=True),
            keras.layers.GlobalAveragePooling1D(),
            keras.layers.Lambda(lambda x: tf.math.l2_normalize(x, axis=-1)),
        ]
    )
    first = keras.Input(shape=(1,), dtype="string")
    second = keras.Input(shape=(1,), dtype="string")
    both = keras.layers.Concatenate(axis=1)([branch(first), branch(second)])
    return keras.Model(inputs=[first, second], outputs=both), vectorizer.vocabulary_size()


def step_clock():
    """A Keras callback whose ``ends`` holds the clock at the end of every training step."""
    import keras

    class StepClock(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.ends: list[float] = []

        def on_train_batch_end(self, batch, logs=None):
            self.ends.append(time.perf_counter())

    return StepClock()


def main(
    pairs: Annotated[Path, typer.Argument(help="Duplicate pairs, tab-separated, one a line.")],
    steps: Annotated[int, typer.Option(min=1, help="Optimizer steps per timed window.")] = 200,
    repeats: Annotated[int, typer.Option(min=1, help="Timed windows; the median is reported.")] = 3,
    threads: Threads = os.cpu_count() or 1,
) -> None:

    import keras
    import numpy as np
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(threads)
    tf.random.set_seed(0)
    with open(pairs, encoding="utf-8") as f:
        q1, q2 = zip(*(line.rstrip("\n").split("\t") for line in f))
    q1, q2 = np.array(q1, dtype=object), np.array(q2, dtype=object)
    model, vocab_size = siamese([*q1, *q2])
    model.compile(loss=triplet_loss, optimizer=keras.optimizers.Adam(learning_rate=0.01))

    steps = WARMUP + steps * repeats
    data = (
        tf.data.Dataset.from_tensor_slices(((q1, q2), np.zeros(len(q1), dtype="float32")))
        .shuffle(len(q1), seed=0, reshuffle_each_iteration=True)
        .batch(BATCH, drop_remainder=True)
        .repeat()
    )
    times = step_clock()
    model.fit(data, epochs=1, steps_per_epoch=steps, callbacks=[times], verbose=0)
    ends = times.ends
    windows = [
        steps * BATCH / (ends[WARMUP - 1 + (r + 1) * steps] - ends[WARMUP - 1 + r * steps]) for r in range(repeats)
    ]
    report(
        {
            "keras_seed_pairs_per_s": round(statistics.median(windows)),
            "keras_seed_pairs_per_s_windows": [round(w) for w in windows],
            "keras_vocab_size": vocab_size,
            "tensorflow": tf.__version__,
            "keras": keras.__version__,
            "threads": threads,
        }
    )
