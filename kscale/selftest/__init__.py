"""A self-checking training script shipped with kscale, run by `kscale test` under the real launcher.

It checks the three things a data-parallel Keras job relies on - an allreduce sums across ranks, a
broadcast makes differently initialised weights equal, and after a few training steps on different data
every rank holds the same weights - and prints PASS or FAIL with the reason on every rank.
"""
