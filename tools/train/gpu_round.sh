#!/usr/bin/env bash
# On the GPU machine, from the repository root, after unpacking a bundle with
# the serving binaries and speculative_gpu (tools/gpu/bundle.sh, BUNDLE_PACK=
# "serve tools/speculative_gpu"): one round of DSpark stage training on weir's
# greedy pools (README "Fifth run"), the stages taken into a copy of the
# checkpoint, and the served measurement of both (tools/gpu/speculative_check.sh).
#   tools/train/gpu_round.sh
# Environment (defaults in brackets):
#   TD [.train_data]      tools/train/carry_data.sh's folder
#   OUT [$OUT]            what comes back: model-00001-of-00001.safetensors (the
#                         checkpoint with the new stages), train.log, spec.txt
#   INIT [models/tiny]    the checkpoint whose stages train further
#   POOLS [every tools/train/data/dspark_pool_*.u16.xz]  pools to train on
#   GPU_POOLS [0]         pools of 4,096 windows to decode first on the device
#                         (seeds POOL_SEED [31], 32, ...; weir --backend=cuda)
#   BUDGET [4.0]          minutes of DSpark steps (the step count is fixed from
#                         steps 10-40); MAX_MINUTES [BUDGET + 2.5]
#   LR [1e-3], EVERY [1]  --dspark_lr, --dspark_greedy_every
#   TRAIN_FLAGS           more train.py flags, space-separated
# SPEC_RUNS and SPEC_FLAGS pass to speculative_check.sh (e.g. SPEC_RUNS="1 256 32").
# Exits non-zero if a step fails (speculative_check.sh: outputs differ from off).
set -euo pipefail
td="${TD:-.train_data}"
out="${OUT:?set OUT}"
init="${INIT:-models/tiny}"
bundle="${BUNDLE:-.gpu_bundle}"
budget="${BUDGET:-4.0}"
max_minutes="${MAX_MINUTES:-$(python3 -c "print(${budget} + 2.5)")}"
export PYTHONUNBUFFERED=1
export LD_LIBRARY_PATH="${bundle}/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
export NCCL_NVLS_ENABLE=0
mkdir -p "${out}"
[[ -f "${td}/tokens_train.u16" ]] || xz -dk "${td}/tokens_train.u16.xz"

pools=()
if [[ -n "${POOLS:-}" ]]; then
  IFS=, read -r -a pools <<< "${POOLS}"
else
  pools=(tools/train/data/dspark_pool_*.u16.xz)
fi
seed="${POOL_SEED:-31}"
for ((i = 0; i < ${GPU_POOLS:-0}; ++i)); do
  pool="/tmp/gpu_round_pool_$((seed + i)).u16"
  start=$(date +%s)
  python3 tools/train/weir_greedy_pool.py --tokens="${td}/tokens_train.u16" --windows="${POOL_WINDOWS:-4096}" \
    --seed=$((seed + i)) --out="${pool}" --weir="${bundle}/serve/coordinator_main" \
    --weir_flags="--backend=${POOL_BACKEND:-cuda} --workers=1 --eplb=false --listen=127.0.0.1:0 \
      --http_listen=127.0.0.1:0 --model_dir=${init} \
      --model_cache_dir=/tmp/gpu_round_models --worker_binary=${bundle}/serve/worker_main \
      --startup_timeout_s=600"
  echo "pool ${pool}: $(($(date +%s) - start)) s"
  pools+=("${pool}")
done
all_pools="$(IFS=,; echo "${pools[*]}")"
echo "training on ${#pools[@]} pools: ${all_pools}"

run=/tmp/gpu_round_run
read -r -a extra <<< "${TRAIN_FLAGS:-}"
python3 tools/train/train.py --config "${td}/config.json" --data "${td}" \
  --token_map "${td}/engram_map.json" --init_checkpoint "${init}" --start_phase dspark \
  --batch 64 --seq_len 256 --compile off --dspark_pool "${all_pools}" \
  --dspark_lr "${LR:-1e-3}" --dspark_greedy_every "${EVERY:-1}" --log_every 100 \
  --budget "0,0,${budget}" --max_minutes "${max_minutes}" --out "${run}" "${extra[@]}" \
  2>&1 | tee "${out}/train.log"

model=/tmp/gpu_round_model
rm -rf "${model}" && mkdir -p "${model}" && cp "${init}"/* "${model}/"
python3 tools/train/take_stages.py "${init}/model-00001-of-00001.safetensors" \
  "${run}/export/model-00001-of-00001.safetensors" "${model}/model-00001-of-00001.safetensors"
cp "${model}/model-00001-of-00001.safetensors" "${out}/"
RESULTS="${out}" BUNDLE="${bundle}" tools/gpu/speculative_check.sh "${init}" "${model}"
