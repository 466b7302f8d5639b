"""Every built-in Keras metric class that `compile` takes, on the data it is made for, as keras.io's
imbalanced classification example uses them: a binary classifier (accuracy, crossentropy, hinges, AUC,
precision and recall at thresholds and at a fixed sensitivity or specificity, the four confusion counts,
binary IoU, F1 and F-beta), one on one-hot labels (categorical and top-k accuracy, crossentropy, KL
divergence, categorical hinge, multi-label AUC, precision at top-k, recall of a class, counts at several
thresholds, the one-hot IoUs), one on integer labels (the sparse ones, IoU and mean IoU of class ids) and
a regression (errors, R², cosine, log-cosh, Poisson; Keras 3's correlations, tf.keras' MeanRelativeError).
Sample weights in fit, in `validation_data` and in evaluate (F-scores unweighted: tf.keras' fail on
weights in one process), on numbers of samples no batch divides (37 to validate, 101 to evaluate); some
results are arrays (one per threshold or class). Each metric's state must be combined over workers as one
process counts it: the four confusion counts in evaluate were each worker's own on torch. Keras' `Mean`,
`Sum` and `MeanTensor` take values, not labels and predictions: a train_step's own metrics
(`custom_metric_uneven`, `train_step_own_metrics`)."""

import numpy as np

FAMILIES = ("keras2", "keras3-tf", "keras3-jax", "keras3-torch")
EXACT = True


def binary_metrics(keras):
    m = keras.metrics
    return [
        m.BinaryAccuracy(),
        m.BinaryCrossentropy(),
        m.Hinge(),
        m.SquaredHinge(),
        m.AUC(),
        m.AUC(curve="PR", name="auc_pr"),
        m.Precision(),
        m.Precision(thresholds=[0.3, 0.5, 0.7], name="precision_at_thresholds"),
        m.Recall(),
        m.PrecisionAtRecall(0.5),
        m.RecallAtPrecision(0.5),
        m.SensitivityAtSpecificity(0.5),
        m.SpecificityAtSensitivity(0.5),
        m.TruePositives(),
        m.FalsePositives(),
        m.TrueNegatives(),
        m.FalseNegatives(),
        m.FalseNegatives(thresholds=[0.3, 0.7], name="false_negatives_at_thresholds"),
        m.BinaryIoU(target_class_ids=[0, 1], threshold=0.5),
    ]


def f_scores(keras, average):
    """In `metrics`, unweighted, in every family: tf.keras' F-scores fail on sample weights."""
    m = keras.metrics
    return [m.F1Score(average=average, threshold=0.4), m.FBetaScore(average=average, beta=2.0)]


def classifier_metrics(keras):
    m = keras.metrics
    return [
        m.Accuracy(),
        m.CategoricalAccuracy(),
        m.TopKCategoricalAccuracy(k=2),
        m.CategoricalCrossentropy(),
        m.KLDivergence(),
        m.CategoricalHinge(),
        m.AUC(multi_label=True, num_labels=3, name="auc_multi_label"),
        m.Precision(top_k=1, name="precision_top_1"),
        m.Recall(class_id=2, name="recall_class_2"),
        m.TruePositives(thresholds=[0.2, 0.5]),
        m.OneHotIoU(num_classes=3, target_class_ids=[0, 2]),
        m.OneHotMeanIoU(num_classes=3),
        m.MeanIoU(num_classes=3, sparse_y_true=False, sparse_y_pred=False, name="mean_io_u_one_hot"),
    ]


def sparse_metrics(keras):
    m = keras.metrics
    return [
        m.SparseCategoricalAccuracy(),
        m.SparseTopKCategoricalAccuracy(k=2),
        m.SparseCategoricalCrossentropy(),
        m.IoU(num_classes=3, target_class_ids=[1], sparse_y_pred=False),
        m.MeanIoU(num_classes=3, sparse_y_pred=False),
    ]


def regression_metrics(keras, family):
    m = keras.metrics
    metrics = [
        m.MeanSquaredError(),
        m.MeanAbsoluteError(),
        m.MeanAbsolutePercentageError(),
        m.MeanSquaredLogarithmicError(),
        m.RootMeanSquaredError(),
        m.R2Score(),
        m.R2Score(class_aggregation=None, name="r2_score_per_output"),
        m.CosineSimilarity(),
        m.LogCoshError(),
        m.Poisson(),
    ]
    if family == "keras2":
        metrics.append(m.MeanRelativeError(normalizer=[1.0, 2.0]))
    else:
        metrics += [m.PearsonCorrelation(), m.ConcordanceCorrelation()]
    return metrics


def main(job):
    keras = job.keras
    rng = np.random.default_rng(11)
    x = rng.normal(size=(202, 6)).astype("float32")
    labels = (x[:, :3] @ rng.normal(size=(3, 3)) + rng.normal(scale=0.7, size=(202, 3))).argmax(axis=1)
    one_hot = np.eye(3, dtype="float32")[labels]
    values = np.log1p(np.exp(x[:, :2] @ rng.normal(size=(2, 2)))).astype("float32") + 0.5
    weights = (rng.integers(4, 13, 202) / 8).astype("float32")  # eighths: counts of them add up exactly
    problems = [
        ("binary", (labels == 0).astype("float32")[:, None], 1, "sigmoid", "binary_crossentropy",
         binary_metrics(keras), f_scores(keras, None)),
        ("classifier", one_hot, 3, "softmax", "categorical_crossentropy", classifier_metrics(keras),
         f_scores(keras, "macro")),
        ("sparse", labels[:, None].astype("int32"), 3, "softmax", "sparse_categorical_crossentropy",
         sparse_metrics(keras), []),
        ("regression", values, 2, "softplus", "mse", regression_metrics(keras, job.family), []),
    ]  # fmt: skip
    for name, y, units, activation, loss, weighted, unweighted in problems:
        job.seed()
        model = keras.Sequential(
            [
                keras.Input((6,)),
                keras.layers.Dense(8, activation="tanh"),
                keras.layers.Dense(units, activation=activation),
            ]
        )
        model.compile(
            optimizer=keras.optimizers.SGD(job.rate(0.05)),
            loss=loss,
            metrics=unweighted,
            weighted_metrics=weighted,
        )
        model = job.distribute(model)
        history = model.fit(
            x[:64],
            y[:64],
            sample_weight=weights[:64],
            batch_size=job.batch(8),
            epochs=2,
            shuffle=False,
            validation_data=(x[64:101], y[64:101], weights[64:101]),
            verbose=0,
        )
        # Validation only: Keras 3 on torch keeps the tensors of fit's training logs in History, and a count's
        # is its state (a view), so one process's History shows every epoch's count as validation's last.
        job.record(f"{name}_validation", {k: v for k, v in history.history.items() if k.startswith("val_")})
        job.record(
            f"{name}_evaluate",
            model.evaluate(
                x[101:],
                y[101:],
                sample_weight=weights[101:],
                batch_size=job.batch(8),
                verbose=0,
                return_dict=True,
            ),
        )
    return model


def _every_metric_reported(records):
    """Every metric took part, in evaluate and in validation, and the counts are not trivial."""
    for name in ("binary", "classifier", "sparse", "regression"):
        evaluate, validation = records[f"{name}_evaluate"], records[f"{name}_validation"]
        assert len(evaluate) > 5, evaluate
        for metric in evaluate:
            assert "val_" + metric in validation, (name, metric)
    counts = records["binary_evaluate"]
    assert all(float(counts[n]) > 0 for n in ("true_positives", "false_positives", "false_negatives")), counts


CHECKS = (_every_metric_reported,)
