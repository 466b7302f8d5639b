"""The benchmark's worker: how it trains kscale's model and the hand-written one in turn (no launches)."""

from __future__ import annotations

import tensorflow as tf

from kscale.bench import worker


def test_in_turn_every_worker_waits_for_the_others_before_each_fit():
    calls: list[str] = []

    def job(name: str) -> worker.Job:
        def fit(epochs: int, callbacks: list) -> None:
            calls.append(f"fit {name} {epochs}")

        return worker.Job(fit, chief=True, replicas=2, barrier=lambda: calls.append(f"wait {name}"))

    turns = [
        (job("kscale"), worker.IterationTimer(tf.keras)),
        (job("theirs"), worker.IterationTimer(tf.keras)),
    ]
    worker.train_in_turn(turns, warmup=2, rounds=2)
    warm_up = ["wait kscale", "fit kscale 2", "wait theirs", "fit theirs 2"]
    first_round = ["wait kscale", "fit kscale 1", "wait theirs", "fit theirs 1"]
    second_round = ["wait theirs", "fit theirs 1", "wait kscale", "fit kscale 1"]  # the other goes first
    assert calls == warm_up + first_round + second_round
