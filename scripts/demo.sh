#!/usr/bin/env bash
# demo.sh — from text to a trained model to generated text, offline, on the Python standard library's own
# source files (every machine with Python has them): trains a byte-level BPE tokenizer on them
# (tools/train_tokenizer.py), prepares training and validation token files (flashtrain data prepare), trains
# a small model (a GPU: `small` at context 256 for a few minutes; the CPU: `tiny` for about a minute),
# writes the loss curves as a PNG beside a unigram model's validation loss of the same data, and generates
# a sample from a prompt with the trained model.
#   bash scripts/demo.sh                 # into build/demo, on the GPU when one is visible
#   FT_DEMO_DEVICE=cpu bash scripts/demo.sh /tmp/demo
# Uses the flashtrain in build/ (FLASHTRAIN_BIN overrides), building it first when missing; installs the
# Python packages it needs (tokenizers, numpy, matplotlib) with install_deps.sh when they are missing.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

python3 -c 'import matplotlib, numpy, tokenizers' 2>/dev/null || bash "$FT_ROOT/scripts/install_deps.sh"
bin=${FLASHTRAIN_BIN:-$FT_BIN}
if [[ ! -x "$bin" ]]; then
  ft_configure
  ft_build flashtrain
fi
out=${1:-$FT_BUILD/demo}
mkdir -p "$out"
stdlib=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["stdlib"])')
start=$SECONDS
say() { echo "demo [$((SECONDS - start)) s]: $*"; }

device=${FT_DEMO_DEVICE:-}
if [[ -z "$device" ]]; then
  if FT_BIN=$bin ft_gpu_visible; then device=cuda; else device=cpu; fi
fi
if [[ $device == cpu ]]; then
  vocab=2048 size=tiny context=64 precision=fp32 max_new=48
  schedule=(--batch 8 --steps 300 --lr 3e-3 --eval-interval 50 --eval-batches 8 --log-interval 50)
else
  vocab=8192 size=small context=256 precision=bf16 max_new=200
  schedule=(--batch 32 --steps 2000 --lr 1e-3 --eval-interval 200 --eval-batches 20 --log-interval 100)
fi
model=(--size "$size" --context "$context" --vocab "$vocab" --precision "$precision" --device "$device")

say "corpus: *.py under $stdlib (without site-packages), device $device"
python3 "$FT_ROOT/tools/train_tokenizer.py" --input "$stdlib" --glob '*.py' --exclude site-packages \
  --vocab-size "$vocab" --output "$out/tokenizer.json"
say "tokenizer trained: $out/tokenizer.json"
"$bin" data prepare --tokenizer "$out/tokenizer.json" --input "$stdlib" --glob '*.py' --exclude site-packages \
  --output "$out/stdlib.npy" --val-fraction 0.05
unigram=$(python3 "$FT_ROOT/tools/unigram_loss.py" --train "$out/stdlib_train.npy" --val "$out/stdlib_val.npy" \
  --vocab "$vocab")
say "unigram model validation loss: $unigram"

rm -rf "$out/checkpoints"
"$bin" train "${model[@]}" "${schedule[@]}" --warmup 100 \
  --data "$out/stdlib_train.npy" --val-data "$out/stdlib_val.npy" --checkpoint-dir "$out/checkpoints" \
  --json "$out/train.json"
python3 "$FT_ROOT/tools/plot_val_loss.py" "$out/train.json" --baseline "$unigram" --baseline-label "unigram model" \
  --output "$out/val_loss.png"
model_loss=$(python3 -c 'import json, sys; rows = json.load(open(sys.argv[1]))["rows"];
print("%.4f" % [r["val_loss"] for r in rows if r.get("val_loss") is not None][-1])' "$out/train.json")

prompt='def read_config(path):'
say "sample (greedy decoding would repeat itself; temperature 0.8, top-k 40):"
"$bin" generate "${model[@]}" --checkpoint "$out/checkpoints" --tokenizer "$out/tokenizer.json" \
  --prompt "$prompt" --max-new-tokens "$max_new" --temperature 0.8 --top-k 40 --seed 1
echo
say "validation loss: model $model_loss vs unigram model $unigram (nats per token); curve: $out/val_loss.png"
python3 -c 'import sys; sys.exit(0 if float(sys.argv[1]) < float(sys.argv[2]) else 1)' "$model_loss" "$unigram" ||
  { say "the model did not beat the unigram model"; exit 1; }
