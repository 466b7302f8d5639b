"""kscale.plan: the arithmetic of N replicas (learning rate, epochs, steps) and how the plan is shown."""

from __future__ import annotations

import dataclasses
import math

import pytest

from kscale.errors import DataError, OptionError
from kscale.plan import (
    BatchSemantics,
    DataPolicy,
    LRScaling,
    Plan,
    divide_epochs,
    divide_steps,
    lr_scale_factor,
    parse_option,
)


@pytest.mark.parametrize(
    ("rule", "replicas", "factor"),
    [
        ("linear", 4, 4.0),
        ("linear", 1, 1.0),
        ("sqrt", 4, 2.0),
        ("sqrt", 2, math.sqrt(2)),
        ("none", 8, 1.0),
        (LRScaling.LINEAR, 3, 3.0),
        (LRScaling.SQRT, 9, 3.0),
    ],
)
def test_lr_scale_factor(rule, replicas, factor):
    assert lr_scale_factor(rule, replicas) == pytest.approx(factor)


def test_unknown_lr_rule_lists_the_valid_ones():
    with pytest.raises(OptionError) as err:
        lr_scale_factor("cubic", 4)
    message = str(err.value)
    assert "lr_scaling='cubic'" in message
    assert "'linear'" in message and "'sqrt'" in message and "'none'" in message
    assert isinstance(err.value, ValueError)  # also catchable as the builtin a user would expect


@pytest.mark.parametrize(
    ("enum_type", "option", "valid"),
    [
        (DataPolicy, "data_policy", ("'shard'", "'divide_epochs'", "'none'")),
        (BatchSemantics, "batch_semantics", ("'per_replica'", "'global'")),
    ],
)
def test_parse_option_lists_the_valid_values(enum_type, option, valid):
    with pytest.raises(OptionError, match=rf"{option}='bogus' is not a valid choice") as err:
        parse_option(enum_type, "bogus", option)
    assert all(v in str(err.value) for v in valid)


def test_parse_option_accepts_members_and_their_strings():
    assert parse_option(DataPolicy, "divide_epochs", "data_policy") is DataPolicy.DIVIDE_EPOCHS
    assert parse_option(DataPolicy, DataPolicy.NONE, "data_policy") is DataPolicy.NONE


@pytest.mark.parametrize(
    ("epochs", "replicas", "expected"), [(10, 4, 3), (8, 4, 2), (9, 4, 3), (1, 8, 1), (3, 1, 3), (5, 5, 1)]
)
def test_divide_epochs_rounds_up_and_never_reaches_zero(epochs, replicas, expected):
    assert divide_epochs(epochs, replicas) == expected


@pytest.mark.parametrize(("steps", "replicas", "expected"), [(10, 4, 2), (4, 4, 1), (7, 2, 3), (5, 1, 5)])
def test_divide_steps_rounds_down(steps, replicas, expected):
    assert divide_steps(steps, replicas) == expected


def test_divide_steps_below_the_replica_count_is_a_data_error():
    with pytest.raises(DataError) as err:
        divide_steps(3, 4)
    message = str(err.value)
    assert "steps_per_epoch=3" in message and "4 replicas" in message
    assert "steps_per_epoch >= 4" in message


def test_divide_steps_names_the_argument_it_was_given():
    with pytest.raises(DataError, match=r"validation_steps=1 is smaller than the 2 replicas"):
        divide_steps(1, 2, "validation_steps")


def full_plan(**changes) -> Plan:
    plan = Plan(
        backend="horovod",
        num_workers=4,
        num_replicas=4,
        lr_scaling=LRScaling.LINEAR,
        data_policy=DataPolicy.SHARD,
        learning_rate_before=0.1,
        learning_rate_after=0.4,
        per_replica_batch=32,
        epochs_before=10,
        epochs_after=10,
        steps_per_epoch_before=100,
        steps_per_epoch_after=25,
    )
    return dataclasses.replace(plan, **changes)


def test_describe_shows_every_decision():
    text = full_plan().describe()
    lines = text.splitlines()
    assert lines[0] == "kscale plan"
    assert "backend          horovod" in text
    assert "4 process(es), 4 replica(s) in sync" in text
    assert "per replica 32, global 128" in text
    assert "0.1 -> 0.4 (linear scaling, x4)" in text
    assert "epochs           10 -> 10" in text
    assert "steps per epoch  100 -> 25" in text
    assert "data policy      shard" in text


def test_describe_with_devices_warmup_notes_and_divided_epochs():
    plan = full_plan(
        backend="mirrored",
        num_workers=1,
        num_replicas=2,
        lr_scaling=LRScaling.SQRT,
        data_policy=DataPolicy.DIVIDE_EPOCHS,
        learning_rate_after=0.1414,
        warmup_epochs=2.0,
        epochs_after=5,
        devices=("CPU:0", "CPU:1"),
        notes=("1 trailing sample(s) of 9 unused so workers stay even",),
    )
    text = plan.describe()
    assert "backend          mirrored on CPU:0, CPU:1" in text
    assert "(sqrt scaling, x1.41421, warmup 2 epoch(s))" in text
    assert "epochs           10 -> 5" in text
    assert "data policy      divide_epochs" in text
    assert "note             1 trailing sample(s) of 9 unused" in text


def test_describe_before_fit_says_values_come_from_the_data():
    plan = Plan(
        backend="single",
        num_workers=1,
        num_replicas=1,
        lr_scaling=LRScaling.NONE,
        data_policy=DataPolicy.NONE,
    )
    assert plan.global_batch is None
    text = plan.describe()
    assert "per replica (from the data), global (from the data)" in text
    assert "(none scaling, x1)" in text


def test_plan_is_frozen_and_with_fit_returns_a_new_one():
    plan = full_plan()
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.per_replica_batch = 8  # type: ignore[misc]
    fitted = plan.with_fit(per_replica_batch=8)
    assert (fitted.global_batch, plan.global_batch) == (32, 128)
    assert fitted.lr_factor == 4.0
