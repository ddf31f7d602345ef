#!/usr/bin/env bash
# Every GPU check in one run, for a machine with a CUDA GPU (docs/speed.md, "On a GPU"):
#   1. the gpu-marked tests (tests/test_gpu.py, tests/test_device.py): every command on a CUDA session,
#      CUDA against the CPU, KV cache against the naive loop, compile against eager;
#   2. torchrun with one process on nccl: train, save, then load and generate in a plain process;
#   3. GPT-2 small through the trainer (bench/gpu_gpt2.py): compiled AdamW, compiled Muon, eager AdamW;
#   4. the default `minitf train` as a user runs it, on the GPU and on that machine's CPU, compile off and on
#      (bench/default_train.py).
# Each step has a time limit, so one hung step cannot eat the others. Logs go to ${OUT:-gpu-logs}/.
# The repository root is put on PYTHONPATH: nothing is installed; the python that has torch with CUDA
# is $PYTHON (default python3). Missing pure-Python packages can be put on PYTHONPATH beforehand.
#   bash bench/on_gpu.sh            # about 6 minutes on one H200
#   bash bench/on_gpu.sh tests torchrun   # only the steps named (tests torchrun gpt2_compiled gpt2_muon
#                                         # gpt2_eager first_train)
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-gpu-logs}
mkdir -p "$out"
py=${PYTHON:-python3}
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
export MINITF_CHECKPOINT_DIR=$(mktemp -d) XDG_STATE_HOME=$(mktemp -d) XDG_CACHE_HOME=$(mktemp -d)

only=" $* "
step() { local name=$1 limit=$2; shift 2; [ "$only" = "  " ] || [[ $only == *" $name "* ]] || return 0
         echo "== $name (limit ${limit} s) $(date +%T)"
         local t0=$SECONDS; timeout "$limit" "$@" > "$out/$name.log" 2>&1; local rc=$?
         tail -n "${TAIL:-6}" "$out/$name.log"; echo "   $name: rc=$rc in $((SECONDS - t0)) s"; }

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
"$py" -c "import torch; print('torch', torch.__version__, '| cuda', torch.version.cuda, '|',
                                torch.cuda.get_device_name(0))"
TAIL=25 step tests 300 "$py" -m pytest -p no:cacheprovider -m gpu tests/test_gpu.py tests/test_device.py -q -rfE \
    --durations=5
step torchrun 90 bash -c "\"$py\" -m torch.distributed.run --standalone --nproc_per_node=1 -m minitf_repl \
    --device cuda --data sort train --steps 300 --save gpu-ddp && \"$py\" -m minitf_repl --device cpu --load gpu-ddp \
    gen 314159= --temperature 0"
step gpt2_compiled 120 "$py" bench/gpu_gpt2.py
step gpt2_muon 120 "$py" bench/gpu_gpt2.py --optimizer muon
step gpt2_eager 60 "$py" bench/gpu_gpt2.py --no-compile --steps 15
step first_train 240 "$py" bench/default_train.py --devices cuda,cpu --compile
echo "== done $(date +%T)"
