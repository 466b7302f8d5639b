# A/A: the same script trained against itself in one job, with the bench worker as of commit 0e374c7 (30 rounds; one launch in each build order).
set -e
cd "$(git rev-parse --show-toplevel)"
W=kscale/bench/worker.py
common="--model cnn --batch 32 --batches 20 --iters 30 --warmup 1"
export TF_CPP_MIN_LOG_LEVEL=2
TF_NUM_INTRAOP_THREADS=2 TF_NUM_INTEROP_THREADS=2 .venv/bin/python $W --impl keras --backend single $common --against keras --result benchmarks/results/recheck/a-a-paired/cnn-keras-against-keras-1.json
TF_NUM_INTRAOP_THREADS=2 TF_NUM_INTEROP_THREADS=2 .venv/bin/python $W --impl keras --backend single $common --against keras --against-first --result benchmarks/results/recheck/a-a-paired/cnn-keras-against-keras-2.json
TF_NUM_INTRAOP_THREADS=1 TF_NUM_INTEROP_THREADS=1 .venv/bin/python -m kscale.cli run --engine horovod -np 2 -- .venv/bin/python $W --impl horovod --backend horovod $common --against horovod --result benchmarks/results/recheck/a-a-paired/cnn-horovod-against-horovod-1.json > benchmarks/results/recheck/a-a-paired/h1.log 2>&1
TF_NUM_INTRAOP_THREADS=1 TF_NUM_INTEROP_THREADS=1 .venv/bin/python -m kscale.cli run --engine horovod -np 2 -- .venv/bin/python $W --impl horovod --backend horovod $common --against horovod --against-first --result benchmarks/results/recheck/a-a-paired/cnn-horovod-against-horovod-2.json > benchmarks/results/recheck/a-a-paired/h2.log 2>&1
echo ok
