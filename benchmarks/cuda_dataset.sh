#!/usr/bin/env bash
# Measure the quick profile's models on a CUDA GPU and write the rows as results documents
# (`devicefit benchmark --json`) that `devicefit ingest` loads on any other machine.
#
# Meant for a GPU host that has torch with CUDA, transformers, typer, rich and psutil but not the
# rest of devicefit's dependencies (no Dagster, DuckDB or OpenVINO needed): run from the
# repository root as
#     OUT=/some/dir benchmarks/cuda_dataset.sh
# Each step writes its own file, so a step that fails or overruns still leaves the others'. What it writes under $OUT:
#   gpu.txt                 nvidia-smi's name, memory, driver; python, torch and transformers versions
#   detect.json             `devicefit detect --json` (the CUDA device with its probe)
#   cuda_generation_*.json  gpt2, t5-small (a), qwen2.5-0.5b (b) in the generation scenario (256 + 64),
#                           fp32/bf16, bs 1/4
#   cuda_generation_moe_mixtral-8x7b-4layers.json
#                           the first four layers of Mixtral-8x7B (benchmarks/configs/), generation,
#                           bf16, bs 1/4/16: a mixture's decode, whose experts' bytes grow with the batch
#                           (MOE=0 leaves this step out)
#   cuda_inference_*.json   the quick profile's 12 models in three groups, fp32/fp16/bf16, bs 1/4/16
#   *.log, steps.txt        each step's console output, exit status and seconds
# BUDGET_S (default 420) bounds the whole script; a step the budget cannot start is named in skipped.txt.
# SET=large measures instead the catalog's large generating models (seeded random weights, built
# on the host in fp32 and cast, so the host needs about 5x the model's bf16 size in RAM) in the
# generation scenario, bf16, bs 1/4, one file per model (cuda_generation_large_<model>.json), in
# the order of MODELS (default below): what the predictors answer for them from small models'
# rows can then be checked against a measurement.
set -u
OUT=${OUT:?set OUT to the output directory}
PY=${PYTHON:-python3}
export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$PWD PYTHONUNBUFFERED=1
mkdir -p "$OUT"
{ nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv
  $PY -c 'import sys, torch, transformers; print("python", sys.version.split()[0], "torch", torch.__version__,
"cuda", torch.version.cuda, "transformers", transformers.__version__)'; } >"$OUT/gpu.txt" 2>&1
DEADLINE=$(( $(date +%s) + ${BUDGET_S:-420} ))  # the whole script; each step gets what is left
step() {  # step NAME ARGS...: one `devicefit benchmark` into $OUT/NAME.json, log in $OUT/NAME.log
  local name=$1 left=$(( DEADLINE - $(date +%s) )); shift
  if (( left < 20 )); then echo "$name: not run, budget spent" >>"$OUT/skipped.txt"; return; fi
  timeout "$left" $PY -m devicefit.cli benchmark --device cuda --timeout "${STEP_TIMEOUT:-120}" --json "$OUT/$name.json" "$@" >"$OUT/$name.log" 2>&1
  echo "$name exit $? after $(( $(date +%s) - DEADLINE + left ))s of ${left}s left" >>"$OUT/steps.txt"
}
timeout 90 $PY -m devicefit.cli detect --json --refresh >"$OUT/detect.json" 2>"$OUT/detect.log"
if [[ ${SET:-quick} == large ]]; then
  for model in ${MODELS:-llama-2-7b qwen2.5-7b gemma-2b mistral-7b phi-3-mini flan-t5-xl whisper-large-v3}; do
    STEP_TIMEOUT=300 step "cuda_generation_large_$model" --model "$model" --mode generation --precision bf16 --batch-sizes 1,4 --max-time 3
  done
  ls -l "$OUT"; exit 0
fi
GEN=(--mode generation --precision fp32,bf16 --batch-sizes 1,4 --max-time 4)
step cuda_generation_a --model gpt2,t5-small "${GEN[@]}"
step cuda_generation_b --model qwen2.5-0.5b "${GEN[@]}"
if [[ ${MOE:-1} == 1 ]]; then  # MOE=0 leaves it out: building its 6B parameters on the host takes a minute or more
  STEP_TIMEOUT=200 step cuda_generation_moe_mixtral-8x7b-4layers --model benchmarks/configs/mixtral-8x7b-4layers.json \
    --mode generation --precision bf16 --batch-sizes 1,4,16 --max-time 3
fi
INF=(--precision fp32,fp16,bf16 --batch-sizes 1,4,16 --max-time 2)
step cuda_inference_text --model bert-tiny,all-MiniLM-L6-v2,gpt2,t5-small "${INF[@]}"
step cuda_inference_cnn --model mobilenet-v2,efficientnet-b0,resnet-18,resnet-50,convnext-tiny "${INF[@]}"
step cuda_inference_vit --model vit-base-patch16-224,whisper-tiny,clip-vit-base-patch32 "${INF[@]}"
ls -l "$OUT"
