"""`kscale bench`: synthetic-data training benchmarks launched through the real launchers.

models (what is trained) -> worker (one launch's measurement, in every worker) -> runner (one launch;
communication reads its Horovod timeline or TensorFlow profile) -> suite (which launches, in what
order) -> analysis (efficiency, ratios, recommendation) -> report (results.json, results.md,
scaling.png). The CLI is kscale.cli.bench.
"""
