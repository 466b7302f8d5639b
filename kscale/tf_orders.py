"""A tf.data dataset read across fit's epochs in one process's orders: a seeded shuffle() that reshuffles
every pass draws an order for every iterator made of it, so the workers make exactly the iterators one
process's fit makes, and a fit stopped on an error marks the dataset as drawn ahead."""

from __future__ import annotations

import weakref
from typing import Any

import tensorflow as tf

from kscale import _tensorflow_private
from kscale.errors import DataError


def epochs_in_one_process_order(
    part: tf.data.Dataset, dataset: tf.data.Dataset, epochs: int, iterators: Any
) -> tf.data.Dataset:
    """`epochs` passes of `part` (this worker's share of the user's `dataset`, one iterator of `dataset`
    per pass) as one stream, each pass on the order one process's fit trains that epoch on.

    A seeded `shuffle()` that reshuffles every pass draws the next order for every iterator made of it,
    read or not, and Keras' fit makes some it never reads (`iterators`: the family's
    `_keras_private.FitIterators`, before the first epoch and after each). So before each pass, as many
    iterators of `dataset` are made and dropped unread as one process's fit makes there; the ones after
    the last epoch are the caller's (`after_last_epoch`), made when training ends. The stream is finite:
    an endless repeat() that the strategy's iterator reads ahead would draw orders for epochs that never
    run, and a later fit on the same dataset would start from another order than one process's."""

    def unread(count: int) -> tf.data.Dataset:
        made = tf.data.Dataset.zip((tf.data.Dataset.range(0), dataset))  # makes an iterator, reads none
        none = made.flat_map(lambda *_: part.take(0))
        return tf.data.Dataset.range(count).flat_map(lambda _: none) if count else part.take(0)

    stream = unread(iterators.before_first_epoch).concatenate(part)
    if epochs > 1:
        later = unread(iterators.after_each_epoch).concatenate(part)
        stream = stream.concatenate(tf.data.Dataset.range(epochs - 1).flat_map(lambda _: later))
    return stream


def of_unknown_length(dataset: tf.data.Dataset) -> tf.data.Dataset:
    """`dataset` with its length unknown to Keras. Keras 3 makes a new iterator as soon as an evaluation
    has read as many batches as a dataset's known length; the next evaluation drops it unread, and what its
    prefetch took meanwhile (batches of a generator, a Sequence's pass, an order of a reshuffling
    shuffle()) is never given again: the next evaluation would read other batches than one process."""
    return dataset.filter(lambda *_: True)


#: The user's datasets whose fit stopped on an error while kscale read them in one process's orders.
_CUT_SHORT: weakref.WeakSet = weakref.WeakSet()


def cut_short(dataset: tf.data.Dataset) -> None:
    """Note that fit stopped on an error while reading `dataset` (epochs_in_one_process_order), where a
    shuffle() of it draws a new order for every iterator: how many it has drawn is then unknown (the
    strategy's prefetch reads ahead of the step that failed), and a later fit would train on other orders
    than one process's (a fit interrupted for BackupAndRestore, then fit again: 0.08-0.33 off)."""
    if _tensorflow_private.dataset_reshuffles(dataset):
        _CUT_SHORT.add(dataset)


def check_not_cut_short(dataset: tf.data.Dataset) -> None:
    """A DataError for a dataset `cut_short` noted: its next orders are not one process's."""
    if dataset in _CUT_SHORT:
        raise DataError(
            "this tf.data dataset was being read by a fit that stopped on an error, and a shuffle() of it "
            "draws a new order for every pass: the workers drew more of its orders ahead of the step that "
            "stopped than one process would have, so a fit on it now would train on other orders than one "
            "process. Make the dataset again for this fit (call the function that builds it; a restarted "
            "job does), or shuffle(..., reshuffle_each_iteration=False)."
        )


def after_last_epoch(dataset: tf.data.Dataset, iterators: Any) -> None:
    """The iterators one process's fit makes of `dataset` after its last epoch (`iterators.after_each_epoch`),
    made and dropped here, so that what reads `dataset` next draws the order it would in one process."""
    for _ in range(iterators.after_each_epoch):
        iter(dataset)
