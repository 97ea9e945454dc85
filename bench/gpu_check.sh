#!/usr/bin/env bash
# GPU benchmark in one command, on a machine with one CUDA GPU and no network (well under 10 minutes):
#   bash bench/gpu_check.sh                 # the whole matrix of bench/grpo_gpu.py, stopping at BUDGET_S (420 s)
#   bash bench/gpu_check.sh --only 1.5b:8:512   # extra flags go to python -m bench.grpo_gpu
#
# It needs, beside the checkout (both are git-ignored, so name them when copying the tree over):
#   runs/real_model/tokenizer/   SmolLM2-135M-Instruct's tokenizer alone (3.4 MB), written by `make real-model`
#   .whl/                        the wheels the GPU image lacks, installed here with --no-deps into /tmp/site:
#       trl-1.16.0-py3-none-any.whl                     (requires transformers>=4.56.2, accelerate>=1.10.1)
#       datasets-5.2.0-py3-none-any.whl                 (requires pyarrow>=24, huggingface-hub>=1.31, dill, multiprocess)
#       dill-0.4.1-py3-none-any.whl                     (datasets: dill<0.4.2; 0.4.0 also fits)
#       multiprocess-0.70.19-py312-none-any.whl         (datasets: multiprocess<0.70.20; match the python version)
#       math_verify-0.9.0-py3-none-any.whl
#       latex2sympy2_extended-1.11.0-py3-none-any.whl   (math-verify's parser; needs sympy, present)
#       antlr4_python3_runtime-4.13.2-py3-none-any.whl  (latex2sympy2_extended's runtime)
#     and, to run the versions the CPU tests run (recommended; the image's transformers 5.17 is untested here):
#       transformers-5.24.0-py3-none-any.whl            (requires tokenizers>=0.23.1,<0.24, typer, hf-hub>=1.31)
#       peft-0.21.2-py3-none-any.whl
#   Download them on a machine with PyPI, for the GPU machine's python (3.12 here):
#     pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#       --platform manylinux_2_28_x86_64 -d .whl trl==1.16.0 datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19 \
#       math-verify==0.9.0 latex2sympy2_extended==1.11.0 antlr4-python3-runtime==4.13.2 transformers==5.24.0 peft==0.21.2
# The image already has torch, accelerate, pandas, pyarrow, numpy, sympy, xxhash, fsspec, huggingface-hub, regex,
# requests, safetensors, tokenizers, pyyaml, rich, tqdm, psutil. Not needed and never imported on this path: wandb,
# bitsandbytes, vllm, matplotlib (the benchmark prints which optional modules got imported; it must be none).
#
# Output: one JSON line per setting as it finishes, then a markdown table; $OUT/grpo_gpu.json when $OUT is set.
set -euo pipefail
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1 WANDB_MODE=disabled
export TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1

if compgen -G ".whl/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi

python3 - <<'EOF'
import importlib, importlib.metadata, sys
missing = []
for module, dist in [("torch", "torch"), ("transformers", "transformers"), ("trl", "trl"), ("peft", "peft"),
                     ("accelerate", "accelerate"), ("datasets", "datasets"), ("pyarrow", "pyarrow"),
                     ("math_verify", "math-verify")]:
    try:
        importlib.import_module(module)
        print(f"{dist} {importlib.metadata.version(dist)}")
    except Exception as error:  # report every missing piece, then stop
        missing.append(f"{module}: {error!r}")
import torch
print("cuda:", torch.cuda.is_available(), torch.cuda.get_device_name() if torch.cuda.is_available() else "")
if missing or not torch.cuda.is_available():
    sys.exit("cannot run: " + "; ".join(missing or ["no CUDA GPU"]))
EOF
test -f runs/real_model/tokenizer/tokenizer.json || { echo "runs/real_model/tokenizer is missing (make real-model)"; exit 2; }

timeout "${TIMEOUT_S:-560}" python3 -m bench.grpo_gpu --tokenizer runs/real_model/tokenizer \
  --budget_s "${BUDGET_S:-420}" --out "${OUT:-/tmp}/grpo_gpu.json" "$@"
