"""kscale.step_weights: a replica's gradient weight travels with its batch, is taken off before the step sees
the batch, and scales that step's gradients only."""

from __future__ import annotations

import numpy as np

from kscale import loss_reduction, model_steps, step_weights
from kscale.step_weights import Weighted


def watch(model, replicas: int) -> None:
    """The model's steps inside step_weights' layer alone, as kscale.model_steps binds them."""
    model_steps.bind(model, [step_weights.around(replicas)])


class Model:
    """A stand-in for a Keras model: its train_step records what it gets and returns the scaled gradients."""

    def __init__(self):
        self.seen = []

    def train_step(self, data):
        self.seen.append(data)
        return step_weights.scale([np.ones(2, np.float32), None])

    def test_step(self, data):
        return loss_reduction.scaled_sum(np.float32(3.0))  # a batch's summed loss


def test_the_step_gets_the_batch_and_its_gradients_are_weighted_by_its_share():
    model = Model()
    watch(model, 2)
    batch = (np.zeros((3, 1)), np.zeros(3))
    gradients = model.train_step(Weighted(batch, np.float32(1.5)))
    assert model.seen[-1] is batch and gradients[1] is None
    np.testing.assert_array_equal(gradients[0], [1.5, 1.5])
    # one weight per row, as Keras 3 cuts it with the batch: the first is the step's
    gradients = model.train_step(Weighted(batch, np.full(3, 0.5, np.float32)))
    np.testing.assert_array_equal(gradients[0], [0.5, 0.5])


def test_a_batch_without_a_weight_and_an_update_outside_the_step_are_left_alone():
    model = Model()
    watch(model, 2)
    watch(model, 2)  # once per model
    model.train_step(Weighted((np.zeros(1),), 2.0))
    np.testing.assert_array_equal(model.train_step((np.zeros(1),))[0], [1.0, 1.0])
    plain = [np.ones(2, np.float32)]
    assert step_weights.scale(plain) is plain  # after a step: nothing left over
    assert step_weights.batch_of(Weighted("batch", 1.0)) == "batch" and step_weights.batch_of("x") == "x"


def test_a_stateless_step_takes_its_state_first():
    class Stateless:
        def train_step(self, state, data):
            return state, data

        def test_step(self, state, data):
            return loss_reduction.scaled_sum(np.float32(1.0))

    model = Stateless()
    watch(model, 2)  # the batch is the last argument
    assert model.train_step("state", Weighted("batch", 1.0)) == ("state", "batch")


def test_a_sum_is_a_replicas_share_of_one_processs_sum_inside_the_steps_only():
    """kscale.loss_reduction: R replicas' sums, weighted by their slices' shares and averaged, add up."""

    class Summing(Model):
        def train_step(self, data):
            return loss_reduction.scaled_sum(np.float32(3.0))

    model = Summing()
    watch(model, 2)
    assert model.train_step((np.zeros(1),)) == 6.0  # a full step: x R
    assert model.train_step(Weighted((np.zeros(1),), np.float32(1.5))) == 4.0  # x R / w
    assert model.test_step((np.zeros(1),)) == 6.0
    assert loss_reduction.scaled_sum(np.float32(3.0)) == 3.0  # outside a step: as Keras computed it
    alone = Summing()
    watch(alone, 1)
    assert alone.train_step((np.zeros(1),)) == 3.0


class LossScaledModel(Model):
    """A step whose loss scale takes the weight into the loss (a mixed-precision loss scale does)."""

    def train_step(self, data):
        self.seen.append(data)
        self.in_loss = step_weights.in_loss()
        return step_weights.scale([np.ones(2, np.float32)])


def test_a_weight_the_loss_carried_does_not_weigh_the_gradients_again_and_only_in_that_step():
    model = LossScaledModel()
    watch(model, 2)
    batch = (np.zeros((3, 1)), np.zeros(3))
    gradients = model.train_step(Weighted(batch, np.float32(1.5)))
    assert model.in_loss == np.float32(1.5)
    np.testing.assert_array_equal(gradients[0], [1.0, 1.0])
    plain = Model()
    watch(plain, 2)
    np.testing.assert_array_equal(plain.train_step(Weighted(batch, np.float32(1.5)))[0], [1.5, 1.5])
