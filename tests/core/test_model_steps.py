"""kscale.model_steps: a distributed model's steps are its own inside kscale's layers, innermost first,
bound once per model."""

from __future__ import annotations

from kscale import model_steps


class Model:
    def train_step(self, data):
        return ["own", data]

    def test_step(self, data):
        return ["own test", data]


def tagging(tag: str):
    def layer(step, test):
        return (lambda data: [tag, *step(data)]), (lambda data: [tag, *test(data)])

    return layer


def test_the_layers_wrap_the_models_own_steps_innermost_first():
    model = Model()
    model_steps.bind(model, [tagging("backend"), None, tagging("weights")])
    assert model.train_step(1) == ["weights", "backend", "own", 1]
    assert model.test_step(2) == ["weights", "backend", "own test", 2]
    assert Model.train_step(model, 3) == ["own", 3]  # the class is not changed


def test_a_model_distributed_again_keeps_its_steps():
    model = Model()
    model_steps.bind(model, [tagging("first")])
    model_steps.bind(model, [tagging("second")])
    assert model.train_step(1) == ["first", "own", 1]


def test_a_step_set_on_the_instance_is_the_one_wrapped():
    model = Model()
    model.train_step = lambda data: ["instance", data]
    model_steps.bind(model, [tagging("kscale")])
    assert model.train_step(1) == ["kscale", "instance", 1]
