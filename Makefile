# Fast TensorFlow Training: `make run` executes the course, `make test` proves it works.
# Both create the virtual environment first if it is missing (needs python3.11 and pip).
# `make test` also runs the unit tests and notebooks on Colab's stack, in .venv-compat (needs
# python3.13), and the TPU notebooks on Colab's and Kaggle's TPU stacks (need python3.13 and
# python3.12); see README, "Supported versions".

PYTHON ?= $(shell command -v python3.11 || command -v python3)
# Every environment is installed by uv (a release, from PyPI, into .venv first): it links each
# package from its cache (~/.cache/uv), so a fresh clone's three stacks (about 10 GB, torch's
# CUDA build included) install in seconds once one clone has fetched them.
UV_VERSION := 0.13.9
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
UV := $(BIN)/uv
PROFILE ?= quick
PYTEST := $(BIN)/python -m pytest -q -p no:cacheprovider
# How the two test workers share the work: unit tests are stolen by whichever worker is idle
# (their lengths vary from milliseconds to a minute); notebooks go one at a time to the first
# free worker, the slowest first (tests/test_notebooks.py orders them), so both end together.
UNIT_SPLIT := -n 2 --dist worksteal
NOTEBOOK_SPLIT := -n 2 --dist load --maxschedchunk 1
# Python's bytecode caches, in build/pycache (PYTHONPYCACHEPREFIX: nothing is written beside
# the sources, in the repository or in the environments), even where PYTHONDONTWRITEBYTECODE is
# set, as on machines that keep no caches: without them every process compiles each module it
# imports again: `import tensorflow, keras` took 19 s here, 6 to 9 s with them. `make clean`
# removes them.
export PYTHONDONTWRITEBYTECODE :=
export PYTHONPYCACHEPREFIX := $(abspath build/pycache)
# The tests never reach for the network: data sets fall back to bundled data. A kernel that
# crashes (a segfault in TensorFlow's threads) prints every thread's Python stack first.
TEST_ENV := COURSE_OFFLINE=1 MPLBACKEND=Agg PYTHONFAULTHANDLER=1

# A Python of one minor release: on PATH if it runs (a pyenv shim may not), else pyenv's.
find_python = $(firstword $(foreach p,python$(1) $(wildcard $(HOME)/.pyenv/versions/$(1).*/bin/python$(1)),\
  $(shell $(p) -c 'import sys; sys.version_info[:2] == ($(subst .,$(comma) ,$(1))) and print(sys.executable)' 2>/dev/null)))
comma := ,
# The Colab-shaped stack (requirements-compat.txt) on Colab's Python, which its "# python:" line
# names (`python -m tools.compat set` moves it); or pass COMPAT_PYTHON=/path/to/python3.X.
COMPAT_VERSION := $(shell sed -n 's/^\# python: //p' requirements-compat.txt)
COMPAT_PYTHON ?= $(call find_python,$(COMPAT_VERSION))
COMPAT_VENV := .venv-compat
COMPAT_BIN := $(COMPAT_VENV)/bin
COMPAT_STAMP := $(COMPAT_VENV)/.installed
COMPAT_BUILD := build/test-compat
COMPAT_PYTEST := $(COMPAT_BIN)/python -m pytest -q -p no:cacheprovider
# The two TPU stacks, for notebooks 09 and 10 (JAX with Keras, and torch_xla), each on its
# image's Python, which its requirements file's "# python:" line names (found as COMPAT_PYTHON
# is; or pass TPU_PYTHON= or KAGGLE_PYTHON=/path/to/python3.X): Colab's TPU image
# (requirements-tpu.txt, .venv-tpu), without TensorFlow, and Kaggle's
# (requirements-tpu-kaggle.txt, .venv-tpu-kaggle), with tensorflow-cpu installed beside them.
# Colab's registers its kernel in .venv as "course-tpu", through which `make run` executes
# those two notebooks.
TPU_VERSION := $(shell sed -n 's/^\# python: //p' requirements-tpu.txt)
TPU_PYTHON ?= $(call find_python,$(TPU_VERSION))
TPU_VENV := .venv-tpu
TPU_BIN := $(TPU_VENV)/bin
TPU_STAMP := $(TPU_VENV)/.installed
TPU_KERNEL_STAMP := $(VENV)/.tpu-kernel
TPU_BUILD := build/test-tpu
TPU_PYTEST := $(TPU_BIN)/python -m pytest -q -p no:cacheprovider
KAGGLE_VERSION := $(shell sed -n 's/^\# python: //p' requirements-tpu-kaggle.txt)
KAGGLE_PYTHON ?= $(call find_python,$(KAGGLE_VERSION))
KAGGLE_VENV := .venv-tpu-kaggle
KAGGLE_BIN := $(KAGGLE_VENV)/bin
KAGGLE_STAMP := $(KAGGLE_VENV)/.installed
KAGGLE_BUILD := build/test-tpu-kaggle
KAGGLE_PYTEST := $(KAGGLE_BIN)/python -m pytest -q -p no:cacheprovider
# What notebook 09's first cell sets (Keras on JAX, 8 host devices) and notebook 10's
# (PyTorch/XLA on 8 CPU devices), for the unit tests of their plumbing and checks
JAX_ENV := KERAS_BACKEND=jax JAX_PLATFORMS=cpu XLA_FLAGS=--xla_force_host_platform_device_count=8
XLA_ENV := PJRT_DEVICE=CPU CPU_NUM_DEVICES=8
# Runs one stage of `make test` and says how long it took: wall-clock seconds, and the CPU
# seconds (user + system) of all its processes, which do not depend on what else is running.
# (`times` runs in this shell, not in a $(...) subshell, which has no children of its own.)
STAGE = @start=$$(date +%s); $(MAKE) --no-print-directory $(1) || exit 1; \
  t=$$(mktemp); times > $$t; cpu=$$(awk 'NR == 2 { split($$1, u, /[ms]/); split($$2, s, /[ms]/); \
    printf "%.0f", u[1] * 60 + u[2] + s[1] * 60 + s[2] }' $$t); rm -f $$t; \
  wall=$$(( $$(date +%s) - start )); echo "$(1) $$wall $$cpu" >> $(TIMES); \
  echo "== stage $(1): $$wall s wall, $$cpu s CPU"
# Where `make test` keeps its stages' times, for the table it prints at the end.
TIMES := build/test-times.txt

.PHONY: help venv venv-compat venv-tpu environments run bench test lint check-notebooks all-stacks \
        units-compat \
        units unit \
        pinned-unit compat-notebooks tpu tpu-unit tpu-unit-without-tensorflow tpu-unit-keras-jax \
        tpu-unit-pytorch-xla kaggle-unit-pytorch-xla tpu-notebooks kaggle-notebooks \
        clean-notebooks lessons solutions \
        set-repo clean gpu-check site site-test bench-test lock

help:
	@echo "make run [PROFILE=quick|full]  execute every notebook into build/ and print a summary"
	@echo "make test                      lint, notebook checks, unit tests (compat stack; heavy and"
	@echo "                               tools tests pinned), each notebook twice in one kernel on the"
	@echo "                               compat stack (exercises untouched, then solved; nbval"
	@echo "                               compares the runs), 09 and 10 on Colab's and Kaggle's"
	@echo "                               TPU stacks"
	@echo "make bench                     run the benchmarks into build/bench/results.{json,md}"
	@echo "make bench-test                the benchmarks' own tests (CI runs them after make test)"
	@echo "make gpu-check                 the course on an NVIDIA GPU (CUDA TF in .venv-gpu) into"
	@echo "                               build/gpu-check/report.md; the CPU-safe parts without one"
	@echo "make gpu-wheels                the wheels gpu-check needs on an image without TensorFlow"
	@echo "make site [EXECUTED=DIR]       the course site from build/executed into build/site"
	@echo "make site-test                 build the site from make test's notebooks; check it in Chromium"
	@echo "make clean-notebooks           strip outputs, normalise metadata and URLs"
	@echo "make solutions                 the notebooks with their exercises solved, in build/solutions"
	@echo "make lessons                   copy the notebooks' #@save cells into helpers/lessons"
	@echo "make set-repo REPO=owner/name [REF=v0.1.0]  point badges and installs at a release"
	@echo "make lock [LOCK_ARGS=--upgrade]  compile each stack's lock from its requirements file"

$(UV):
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q uv==$(UV_VERSION)

# Installs lock $(2) (every package pinned, with its hashes) into the environment whose
# interpreter is $(1), then the helpers package (editable, without its dependencies: the lock
# pins them), and says how long it took and what it holds.
INSTALL = @start=$$(date +%s); $(UV) pip install -q --python $(1) --require-hashes -r $(2) && \
  $(UV) pip install -q --python $(1) --no-deps -e . && \
  echo "make: $(2) installed in $$(( $$(date +%s) - start )) s"

$(STAMP): requirements.lock pyproject.toml $(UV)
	$(call INSTALL,$(BIN)/python,requirements.lock)
	@touch $@

venv: $(STAMP)

# The site's Sphinx stack, on top of the pinned environment: its lock is compiled within
# requirements.lock, so it moves none of the pinned environment's packages.
SITE_STAMP := $(VENV)/.site-installed
$(SITE_STAMP): $(STAMP) requirements-site.lock
	$(UV) pip install -q --python $(BIN)/python --require-hashes -r requirements-site.lock
	@touch $@

# The recipe of a stack's environment: $(1), its folder, made on Python $(2) (the image's:
# made again if it holds another) by the interpreter $(3) (passed as $(4)=...), from
# requirements file $(5).
STACK_VENV = @$(1)/bin/python -c 'import sys; sys.exit(sys.version_info[:2] != ($(subst .,$(comma),$(2))))' \
	  2>/dev/null || { test ! -e $(1) || { echo "make: $(1) is not Python $(2) (the image's): \
	  making it again"; rm -rf $(1); }; }; \
	test -x $(1)/bin/python || test -n "$(3)" || { echo "make: $(1) needs Python $(2), found \
	neither on PATH nor in pyenv: install it, or pass $(4)=/path/to/python$(2)"; exit 1; }; \
	test -x $(1)/bin/python || $(3) -m venv $(1)

$(COMPAT_STAMP): requirements-compat.lock pyproject.toml $(UV)
	$(call STACK_VENV,$(COMPAT_VENV),$(COMPAT_VERSION),$(COMPAT_PYTHON),COMPAT_PYTHON)
	$(call INSTALL,$(COMPAT_BIN)/python,requirements-compat.lock)
	@touch $@

venv-compat: $(COMPAT_STAMP)

$(TPU_STAMP): requirements-tpu.lock pyproject.toml $(UV)
	$(call STACK_VENV,$(TPU_VENV),$(TPU_VERSION),$(TPU_PYTHON),TPU_PYTHON)
	$(call INSTALL,$(TPU_BIN)/python,requirements-tpu.lock)
	@touch $@

$(KAGGLE_STAMP): requirements-tpu-kaggle.lock pyproject.toml $(UV)
	$(call STACK_VENV,$(KAGGLE_VENV),$(KAGGLE_VERSION),$(KAGGLE_PYTHON),KAGGLE_PYTHON)
	$(call INSTALL,$(KAGGLE_BIN)/python,requirements-tpu-kaggle.lock)
	@touch $@

# The TPU stack's kernel, registered in .venv (where `make run` starts kernels).
$(TPU_KERNEL_STAMP): $(STAMP) $(TPU_STAMP)
	$(TPU_BIN)/python -m ipykernel install --prefix $(abspath $(VENV)) --name course-tpu \
	  --display-name "Python (course TPU stack: JAX, Keras, torch_xla)" > /dev/null
	@touch $@

venv-tpu: $(TPU_KERNEL_STAMP)

# Every stack installs from its lock: `make lock` compiles each from its requirements file
# (uv, for Linux x86_64 on the stack's Python, every package with its hashes; the site's within
# requirements.lock, the compat and Colab TPU stacks within their image's freeze in freezes/,
# so that each package the image ships has its version there) and prints what moved.
# `make lock LOCK_ARGS=--upgrade` also moves what no requirements file pins to its newest.
PINNED_VERSION := $(shell sed -n 's/^\# python: //p' requirements.txt)
LOCK_PINS = sed -n 's/^\([a-z0-9][^= ]*\)==\([^ ]*\).*/\1 \2/p' $(1) 2>/dev/null | LC_ALL=C sort
LOCK = @old=$$(mktemp); $(call LOCK_PINS,$(3)) > $$old; \
  $(UV) pip compile -q --generate-hashes --custom-compile-command "make lock" \
    --python-platform x86_64-manylinux_2_28 --python-version $(1) $(LOCK_ARGS) $(2) -o $(3) && \
  echo "$(3):" && $(call LOCK_PINS,$(3)) | LC_ALL=C join -a1 -a2 -e none -o 0,1.2,2.2 $$old - | \
  awk '$$2 != $$3 { print "  " $$1 ": " $$2 " -> " $$3; n++ } END { if (!n) print "  nothing moved" }'; \
  status=$$?; rm -f $$old; exit $$status

lock: $(UV)
	$(call LOCK,$(PINNED_VERSION),requirements.txt,requirements.lock)
	$(call LOCK,$(PINNED_VERSION),requirements-site.txt -c requirements.lock,requirements-site.lock)
	$(call LOCK,$(COMPAT_VERSION),requirements-compat.txt -c freezes/colab-gpu.txt,requirements-compat.lock)
	$(call LOCK,$(TPU_VERSION),requirements-tpu.txt -c freezes/colab-tpu.txt,requirements-tpu.lock)
	$(call LOCK,$(KAGGLE_VERSION),requirements-tpu-kaggle.txt,requirements-tpu-kaggle.lock)

run: $(STAMP) $(TPU_KERNEL_STAMP)
	$(BIN)/python -m tools.run_notebooks --profile $(PROFILE)

bench: $(STAMP) $(TPU_STAMP)
	$(BIN)/python -m tools.bench

# The tests marked bench: the benchmarks' own (tests/test_bench.py; some start children on the
# other stacks) and `make gpu-check` run end to end on this CPU from a bare python (it runs a
# notebook, unit tests and a benchmark again): about 2 minutes, outside make test's 12; CI
# (.ci/run) runs them after it.
bench-test: $(STAMP) $(TPU_STAMP)
	$(TEST_ENV) $(PYTEST) -n 2 -m bench tests/test_bench.py tests/test_gpu_check.py

# Needs only a python3 (3.11 or newer, with venv and pip): its launcher imports the standard
# library only. With an NVIDIA GPU it builds .venv-gpu (tensorflow[and-cuda]), without one it
# uses .venv; where TensorFlow can be neither imported nor installed (no network), it runs
# notebook 09 on the image's JAX, with the wheels of `make gpu-wheels`, and the DCGAN step in
# the image's PyTorch on CUDA (`tools.bench --only dcgan_cuda`).
# GPU_CHECK_ARGS: e.g. --budget-s 600, --dry-run, --without-tensorflow.
gpu-check:
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null || { echo "make: \
	gpu-check needs Python 3.11 or newer, and $(PYTHON) is not one: pass PYTHON=/path/to/python3.11"; exit 1; }
	$(PYTHON) -m tools.gpu_check $(GPU_CHECK_ARGS)

# For `make gpu-check` on a GPU image with JAX and no TensorFlow or network: Keras and the
# notebook tools at requirements.txt's pins, and all they need but JAX's own numpy and
# ml-dtypes, as wheels for that image's Python (3.12) into build/gpu-wheels, at most the
# 64 MiB that a copy of the tree may bring beside it.
GPU_WHEELS := build/gpu-wheels
GPU_WHEELS_PYTHON ?= 3.12
.PHONY: gpu-wheels
gpu-wheels: $(UV)
	@rm -rf $(GPU_WHEELS) && mkdir -p $(GPU_WHEELS) && { echo "# python: $(GPU_WHEELS_PYTHON)"; \
	  grep -E '^(keras|ipykernel|ipywidgets|nbformat|papermill|nbval)==' requirements.txt; } \
	  > $(GPU_WHEELS)/requirements.txt
	$(UV) pip compile -q --no-header --no-annotate --python-version $(GPU_WHEELS_PYTHON) \
	  --python-platform x86_64-manylinux_2_28 --no-emit-package numpy --no-emit-package ml-dtypes \
	  $(GPU_WHEELS)/requirements.txt -o $(GPU_WHEELS)/all.txt
	$(BIN)/python -m pip download -q --no-deps --only-binary=:all: --implementation cp \
	  --python-version $(GPU_WHEELS_PYTHON) --platform manylinux_2_28_x86_64 \
	  --platform manylinux_2_17_x86_64 -d $(GPU_WHEELS) -r $(GPU_WHEELS)/all.txt
	@mib=$$(du -sm --apparent-size $(GPU_WHEELS) | cut -f1); test $$mib -le 64 || { echo "make: \
	$(GPU_WHEELS) holds $$mib MiB, over the 64 MiB a device run may bring"; exit 1; }; echo "make: \
	$(GPU_WHEELS): $$(ls $(GPU_WHEELS)/*.whl | wc -l) wheels, $$mib MiB, for Python $(GPU_WHEELS_PYTHON)"

# Stages run in this order and stop at the first that fails; each says how long it took.
# `all-stacks` runs three parts at a time, two workers each on two cores (Kaggle's notebooks on
# one), the longest first and each next part as a slot frees: the unit tests and the notebooks
# on the compat stack, the notebooks on Colab's TPU stack, then on Kaggle's, the tests marked
# heavy or tools on the pinned stack, then the TPU stacks' unit tests. Each part takes longer,
# as thread pools spin on cores they do not get, but all end sooner, since many of their tests
# and cells wait (on children, kernels, sleeps) with a core idle: run as two stages (`make
# units-compat`, then `make tpu`), the first left a core idle for minutes.
test:
	@mkdir -p build && : > $(TIMES) && date +%s > $(TIMES).start
	$(call STAGE,environments)
	$(call STAGE,lint)
	$(call STAGE,check-notebooks)
	$(call STAGE,all-stacks)
	@awk -v total=$$(( $$(date +%s) - $$(cat $(TIMES).start) )) \
	  'BEGIN { print "\nmake test, stage by stage:"; printf "  %-18s %8s %8s\n", "stage", "wall s", "CPU s" } \
	   { printf "  %-18s %8d %8d\n", $$1, $$2, $$3 } \
	   END { printf "  %-18s %8d\n", "total", total }' $(TIMES)

# The four environments `make test` needs (created or brought up to date by uv).
environments: $(STAMP) $(COMPAT_STAMP) $(TPU_KERNEL_STAMP) $(KAGGLE_STAMP)

lint: $(STAMP)
	$(BIN)/ruff check helpers tests tools notebooks solutions docs
	$(BIN)/check-jsonschema --builtin-schema vendor.github-workflows .github/workflows/*.yml

check-notebooks: $(STAMP)
	$(BIN)/python -m tools.check

# Every part of `make test` that runs tests, three at a time, the longest first (see `test`).
all-stacks: $(STAMP) $(COMPAT_STAMP) $(TPU_STAMP) $(KAGGLE_STAMP)
	@$(MAKE) --no-print-directory -j3 -Otarget unit compat-notebooks tpu-notebooks \
	  kaggle-notebooks pinned-unit tpu-unit-keras-jax tpu-unit-without-tensorflow \
	  kaggle-unit-pytorch-xla tpu-unit-pytorch-xla KAGGLE_SPLIT=-n0

# Every stack's unit tests and the compat notebooks, side by side: `make units` the TensorFlow
# stacks' unit tests alone, `make tpu-unit` the TPU stacks'.
units-compat: $(STAMP) $(COMPAT_STAMP) $(TPU_STAMP) $(KAGGLE_STAMP)
	@$(MAKE) --no-print-directory -j3 -Otarget compat-notebooks unit pinned-unit $(TPU_UNITS)

units: $(STAMP) $(COMPAT_STAMP)
	@$(MAKE) --no-print-directory -j2 -Otarget unit pinned-unit

# The unit tests run once each: on the compat stack (Colab's versions, what learners open), less
# what does not depend on the stack or needs the pinned one: the tests marked heavy or tools (see
# pyproject.toml) and those of setup without TensorFlow (the TPU stack runs them, with TensorFlow
# really absent). The tests marked heavy or tools run on the pinned stack (`pinned-unit`, on its
# Python, the oldest supported: 3.11), where the tools run; `test_imports` there imports every
# helpers module alone. Running all of them on both stacks took as long again.
# unit, tpu-unit-keras-jax and tpu-unit-pytorch-xla run every test of the exercise checks: they
# fail if their counts of right and wrong answers are not those of docs/exercise_corpus.json
# (then `python -m tools.exercises --corpus` copies them there and writes the notes' table).
COMPAT_SKIPS := not site and not heavy and not tpu and not bench and not tools
unit: $(COMPAT_STAMP)
	$(TEST_ENV) COURSE_CORPUS=$@ $(COMPAT_PYTEST) $(UNIT_SPLIT) -k "not without_tensorflow" \
	  -m "not notebooks and $(COMPAT_SKIPS)"

pinned-unit: $(STAMP)
	$(TEST_ENV) $(PYTEST) $(UNIT_SPLIT) \
	  -m "(heavy or tools) and not notebooks and not site and not tpu and not bench"

# Copies every notebook's #@save cells into helpers/lessons/ (one source: see docs/maintainers.md).
lessons: $(STAMP)
	$(BIN)/python -m tools.lessons

# The site shows the outputs `make run` left in build/executed; it never runs a notebook.
EXECUTED ?= build/executed
site: $(SITE_STAMP)
	$(BIN)/python -m tools.site --executed $(EXECUTED) --out build/site

# After `make test` (its notebook stages leave each notebook's first run, exercises untouched,
# in build/test-compat/first-pass and build/test-tpu/first-pass): build the site from those
# copies and open every page in headless Chromium, which Playwright drives
# (tests/test_site_browser.py); it never downloads a browser.
SITE_TEST := build/site-test
site-test: $(SITE_STAMP)
	rm -rf $(SITE_TEST) && mkdir -p $(SITE_TEST)/executed
	cp $(COMPAT_BUILD)/first-pass/*.ipynb $(TPU_BUILD)/first-pass/*.ipynb $(SITE_TEST)/executed/
	$(BIN)/python -m tools.site --executed $(SITE_TEST)/executed --out $(SITE_TEST)/site
	$(TEST_ENV) COURSE_SITE=$(SITE_TEST)/site $(PYTEST) -m site tests/test_site_browser.py

# Every notebook with the `test` profile, on the compat stack (the image learners open):
# all its cells twice in one kernel, first with its exercises untouched (every check must say
# "not yet"), then with their solutions (every check must say "right"); nbval compares the
# cells tagged nbval-check-output across the two runs; then, in that kernel, every invalid
# value of notebooks/profiles.toml (Colab's ipykernel, 6.17, is where an error was once read as
# the next request's: issue 22). Copies: build/test-compat/{first-pass,executed}.
COMPAT_ENV := COURSE_STACK=compat COURSE_TEST_BUILD=$(COMPAT_BUILD)
compat-notebooks: $(COMPAT_STAMP)
	rm -rf $(COMPAT_BUILD)
	$(TEST_ENV) $(COMPAT_ENV) $(COMPAT_PYTEST) $(NOTEBOOK_SPLIT) -m notebooks

# The TPU stacks: the plumbing and exercise checks of notebooks 09 and 10 (one engine per
# process, as in the notebooks), on Colab's stack, with what runs without TensorFlow (which is
# not installed there), and torch_xla's on Kaggle's too (its 2.8 differs); then the notebooks,
# on Colab's stack twice in one kernel (exercises untouched, then solved), on Kaggle's once
# (solved), and their invalid parameter values. `make test` runs all of these in its
# `all-stacks` stage, each part as a slot frees; each job's output is printed when it ends.
TPU_UNITS := tpu-unit-without-tensorflow tpu-unit-keras-jax tpu-unit-pytorch-xla \
  kaggle-unit-pytorch-xla
tpu: $(TPU_STAMP) $(KAGGLE_STAMP)
	@$(MAKE) --no-print-directory -j2 -Otarget tpu-notebooks kaggle-notebooks KAGGLE_SPLIT=-n0

tpu-unit: $(TPU_STAMP) $(KAGGLE_STAMP)
	@$(MAKE) --no-print-directory -j2 -Otarget $(TPU_UNITS)

tpu-unit-without-tensorflow:
	$(TEST_ENV) $(TPU_PYTEST) tests/test_without_tensorflow.py tests/test_setup.py -k "without_tensorflow"

tpu-unit-keras-jax:
	$(TEST_ENV) COURSE_CORPUS=$@ $(JAX_ENV) $(TPU_PYTEST) -m tpu tests/test_tpu_keras_jax.py \
	  tests/test_tpu_scale.py

tpu-unit-pytorch-xla:
	$(TEST_ENV) COURSE_CORPUS=$@ $(XLA_ENV) $(TPU_PYTEST) -m tpu tests/test_tpu_pytorch_xla.py

kaggle-unit-pytorch-xla:
	$(TEST_ENV) $(XLA_ENV) $(KAGGLE_PYTEST) -m tpu tests/test_tpu_pytorch_xla.py

# JAX's persistent compilation cache (a folder of the stage's, emptied first): the second
# "Run all" of notebook 09 reuses what the first compiled, as the same programs on new objects.
JAX_CACHE = JAX_COMPILATION_CACHE_DIR=$(abspath $(1))/jax-cache \
  JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS=0 JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES=0
# Colab's TPU stack runs its notebooks on two workers, the slowest first; Kaggle's, beside it,
# one after the other (-n0), once each with their exercises solved: Colab's stack proves a second
# "Run all" in one kernel, Kaggle's its other releases (torch_xla 2.8 in 10; jax 0.10 and Keras
# 3.15 in 11, the engine 09 runs too: 09's compiles there cost make test two minutes).
KAGGLE_SPLIT ?= $(NOTEBOOK_SPLIT)
tpu-notebooks: $(TPU_STAMP)
	rm -rf $(TPU_BUILD)
	$(TEST_ENV) $(call JAX_CACHE,$(TPU_BUILD)) COURSE_STACK=tpu COURSE_TEST_BUILD=$(TPU_BUILD) \
	  $(TPU_PYTEST) $(NOTEBOOK_SPLIT) -m notebooks tests/test_notebooks.py

# Kaggle's image installs with pip, which compiles each module as it installs it; uv does not, so
# torch_xla 2.8's first import would print a SyntaxWarning (gru.py) into notebook 10's output.
KAGGLE_XLA = $$($(KAGGLE_BIN)/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/torch_xla
kaggle-notebooks: $(KAGGLE_STAMP)
	rm -rf $(KAGGLE_BUILD)
	@$(KAGGLE_BIN)/python -W ignore -m compileall -q -j0 $(KAGGLE_XLA)
	$(TEST_ENV) $(call JAX_CACHE,$(KAGGLE_BUILD)) COURSE_STACK=tpu-kaggle COURSE_TEST_PASSES=1 \
	  COURSE_TEST_BUILD=$(KAGGLE_BUILD) $(KAGGLE_PYTEST) $(KAGGLE_SPLIT) -m notebooks \
	  -k "not 09_tpu_keras_jax" tests/test_notebooks.py

# The notebooks with their exercises solved (solutions/NN_name.py), into build/solutions.
solutions: $(STAMP)
	$(BIN)/python -m tools.exercises --out build/solutions

clean-notebooks: $(STAMP)
	$(BIN)/python -m tools.nbclean

set-repo: $(STAMP)
	@test -n "$(REPO)" || (echo "usage: make set-repo REPO=owner/name [REF=vX.Y.Z or a commit]" && exit 2)
	$(BIN)/python -m tools.set_repo "$(REPO)" $(REF)
	$(BIN)/python -m tools.nbclean

clean:
	rm -rf build
