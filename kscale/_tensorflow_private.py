"""The private TensorFlow state kscale reads (tf.keras' lazy loader; the arguments of a tf.data `batch()`),
with the reason no public one serves.

tests/unit/test_tensorflow_private.py (tf.keras lanes) and tests/keras3/test_keras3_private.py (Keras 3 on
TensorFlow) check them on the installed TensorFlow, so an upgrade that renames one fails there, loudly.
"""

from __future__ import annotations

from typing import Any


def tf_keras_decided(tf: Any) -> str | None:
    """Which Keras `tf.keras` already is in this process ("tf_keras", "keras_3", "keras_2"), or None while
    TensorFlow has not decided, without making it decide.

    TensorFlow >= 2.16 picks tf.keras the first time it is used, from TF_USE_LEGACY_KERAS as it is then,
    and keeps it: a process that set the variable later (Ray's TensorflowTrainer sets it in workers that
    have used TensorFlow already) has Keras 3 as tf.keras all the same. Reading `tf.keras` publicly
    would make the decision, with the variable as it is now. TensorFlow < 2.16 has no such loader (None).
    """
    keras = vars(tf).get("keras")
    if keras is None:
        return None
    if type(keras).__name__ == "KerasLazyLoader":  # not used yet, or deciding
        state = vars(keras)
        return state.get("_tfll_keras_version") if state.get("_tfll_initialized") else None
    # Used: the loader put the module it chose in its place
    name = getattr(keras, "__name__", "")
    if name.startswith("tf_keras"):
        return "tf_keras"
    return "keras_3" if name.startswith("keras._tf_keras") else "keras_2"


#: tf.data datasets that pass each of their input's elements on whole and in order: the batches of a
#: batch() under them are the dataset's batches.
_KEEPS_BATCHES = frozenset(
    {
        "_MapDataset",
        "_ParallelMapDataset",
        "_PrefetchDataset",
        "_OptionsDataset",
        "CacheDataset",
        "_AssertCardinalityDataset",
    }
)
_BATCH = frozenset({"_BatchDataset", "_ParallelBatchDataset"})


def batched_samples(dataset: Any) -> tuple[int, int] | None:
    """(batch size, samples batched) of the `batch()` without drop_remainder whose batches `dataset`
    yields, through maps, prefetch, cache and options; None for any other dataset, or where either is
    unknown.

    Whether a dataset's last step holds a sample for every replica depends on its last batch's size,
    which tf.data tells only by reading the whole dataset once (skip() runs every map function before
    it). The Python dataset objects keep their input (`_input_dataset`) and batch()'s arguments
    (`_batch_size`, `_drop_remainder`); its input's cardinality is public.
    """
    while type(dataset).__name__ in _KEEPS_BATCHES:
        dataset = getattr(dataset, "_input_dataset", None)
    if type(dataset).__name__ not in _BATCH:
        return None
    try:
        size, drop = int(dataset._batch_size), bool(dataset._drop_remainder)
        samples = int(dataset._input_dataset.cardinality())
    except (AttributeError, TypeError, ValueError):
        return None
    return None if drop or size < 1 or samples < 0 else (size, samples)


def writing_a_saved_model() -> bool:
    """Whether this thread is writing a SavedModel now (`tf.saved_model.save`, and tf.keras' `model.save`
    in TensorFlow's format, which calls it): the functions traced then are the ones written, which a
    process without Horovod's ops must be able to load. TensorFlow keeps it in `save_context`, which its
    own saving code reads; no public API says it."""
    from tensorflow.python.saved_model import save_context

    return save_context.in_save_context()


def xplane_pb2() -> Any:
    """The message classes of TensorFlow's profiles (`*.xplane.pb`, an XSpace protocol buffer), read by
    kscale.bench.communication. Not public API: `tensorflow.tsl.profiler.protobuf.xplane_pb2` (TF 2.15
    to 2.21 alike); tests/bench/test_communication.py fails when an upgrade moves it."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2 as messages

    return messages


# -- a dataset's graph: what it reads and how it shuffles -------------------------------------------------------
# tf.data says neither publicly. Its graph (DatasetToGraphV2) names its ops and their inputs: the file
# readers' op names, a shuffle op's seeds as its 3rd and 4th inputs. tests/unit/test_tf_data.py checks both
# in the lanes with TensorFlow.


def _dataset_graph(dataset: Any) -> Any:
    """The GraphDef of `dataset`, or None where TensorFlow cannot show it (stateful functions)."""
    import tensorflow as tf

    try:
        serialized = tf.raw_ops.DatasetToGraphV2(input_dataset=tf.data.experimental.to_variant(dataset))
    except (tf.errors.OpError, ValueError, TypeError):
        return None
    return tf.compat.v1.GraphDef.FromString(serialized.numpy())


# Datasets that read files: TensorFlow's file readers, and the reader inside TFRecordDataset(list).
_FILE_READERS = frozenset(
    {
        "TFRecordDataset",
        "TFRecordDatasetV2",
        "TextLineDataset",
        "FixedLengthRecordDataset",
        "FixedLengthRecordDatasetV2",
    }
)


def dataset_files_read(dataset: Any) -> int | None:
    """How many files `dataset` reads, when it reads a list of files known when it was built (what
    tf.data's FILE auto-shard splits among workers); None for any other dataset, or when TensorFlow
    cannot show its graph (stateful functions)."""
    graph = _dataset_graph(dataset)
    if graph is None:
        return None
    ops = {node.op for node in graph.node} | {n.op for f in graph.library.function for n in f.node_def}
    if not ops & _FILE_READERS:
        return None
    import tensorflow as tf

    nodes = {node.name: node for node in graph.node}
    counts = []
    for node in graph.node:  # the list of file names: a constant sliced into a dataset
        source = nodes.get(node.input[0].split(":")[0]) if node.op == "TensorSliceDataset" else None
        value = source.attr["value"].tensor if source is not None and source.op == "Const" else None
        if value is not None and value.dtype == tf.string.as_datatype_enum and value.tensor_shape.dim:
            counts.append(value.tensor_shape.dim[0].size)
    return min(counts) if counts else None


_SHUFFLES = frozenset(
    {
        "ShuffleDataset",
        "ShuffleDatasetV2",
        "ShuffleDatasetV3",
        "ShuffleAndRepeatDataset",
        "ShuffleAndRepeatDatasetV2",
    }
)


def _shuffle_nodes(dataset: Any) -> list[tuple[Any, dict]] | None:
    """Every shuffle() node of `dataset`'s graph (in functions too: interleave's), each with the nodes of
    its graph or function by name; None where TensorFlow cannot show the graph."""
    graph = _dataset_graph(dataset)
    if graph is None:
        return None
    found = []
    for nodes in [list(graph.node), *(list(f.node_def) for f in graph.library.function)]:
        named = {node.name: node for node in nodes}
        found += [(node, named) for node in nodes if node.op in _SHUFFLES]
    return found


def dataset_reshuffles(dataset: Any) -> bool | None:
    """Whether a shuffle() in `dataset` (in functions too) draws a new order for every iterator made of it
    (`reshuffle_each_iteration`, its default). None where TensorFlow cannot show the dataset's graph."""
    shuffles = _shuffle_nodes(dataset)
    if shuffles is None:
        return None
    attrs = [node.attr.get("reshuffle_each_iteration") for node, _ in shuffles]
    return any(attr is not None and attr.b for attr in attrs)


def dataset_shuffle_seeds(dataset: Any) -> list[tuple[int | None, int | None]] | None:
    """The (seed, seed2) of every shuffle() in `dataset` (in functions too: interleave's), which decide the
    orders it draws: (0, 0) for one without a seed, whose orders each process draws at random. None
    where TensorFlow cannot show the dataset's graph."""
    shuffles = _shuffle_nodes(dataset)
    if shuffles is None:
        return None
    import tensorflow as tf

    seeds = []
    for node, named in shuffles:
        pair = []
        for name in node.input[2:4]:
            source = named.get(name.split(":")[0])
            constant = source is not None and source.op == "Const"
            pair.append(int(tf.make_ndarray(source.attr["value"].tensor)) if constant else None)
        seeds.append(tuple(pair))
    return seeds
