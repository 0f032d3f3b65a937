#!/usr/bin/env bash
# BERT vs DeBERTa, controlled: one size, one vocabulary, one corpus,
# one set of held-out books, the same steps, batch, learning rate, seed and
# data order; only the architecture differs (train_mlm.py --arch bert|deberta).
#
#   1. prep      the WordPiece vocabulary and the token caches, once
#                (train_mlm.py --steps 0), shared by both runs
#   2. pretrain  BERT and DeBERTa with train_mlm.py, the bundled model's
#                recipe (docs/results.md 1): 6 layers, hidden 256,
#                4 heads, intermediate 1024, vocabulary 12,000, sequences of
#                128, batch 256, peak LR 1e-3 after 1,000 warm-up steps, MLM
#                only, dropout 0.1; Alice (pg11), Frankenstein (pg84) and
#                Sherlock Holmes (pg1661) held out. Both see the same batches
#                with the same masks (batches are a function of seed and step).
#                The DeBERTa is v3-shaped (relative positions only, c2p|p2c,
#                256 log buckets, shared keys) with MLM through the Enhanced
#                Mask Decoder; BERT has NSP off, so neither has a pair task.
#                Fixed steps, no time budget: DeBERTa is slower per step, so it
#                takes longer for the same data.
#   3. evaluate  train_mlm's own held-out evaluation at the last step: masked-
#                token accuracy and perplexity on EVAL_BATCHES batches of 64
#                held-out sequences (the same masks for both)
#   4. SST-2     finetune.py on GLUE SST-2 train -> dev with the same recipe
#                and seeds for both; the best epoch's dev accuracy
#   5. one table
#
# Every stage is skipped when its result file exists, so a killed run is
# continued by running the script again (pretraining resumes from its checkpoint).
#
#   bash bench/compare_deberta_bert.sh                       # the full comparison (GPU: tens of minutes)
#   STEPS=20 WARMUP=2 EVAL_BATCHES=2 FT_MAX_TRAIN_EXAMPLES=256 FT_EPOCHS=1 FT_SEEDS=0 \
#       OUT=/tmp/compare-check bash bench/compare_deberta_bert.sh   # a check that it runs end to end
set -euo pipefail
cd "$(dirname "$0")/.."

# --- budget knobs (each may be set from the environment) ----------------------
STEPS=${STEPS:-16000}                  # optimizer steps for each model (the bundled model ran 16,273)
WARMUP=${WARMUP:-1000}
BATCH=${BATCH:-256}
LR=${LR:-1e-3}
SEED=${SEED:-0}
MAX_SEQ_LEN=${MAX_SEQ_LEN:-128}
EVAL_EVERY=${EVAL_EVERY:-1000}         # held-out evaluation every N steps, and always at the last
EVAL_BATCHES=${EVAL_BATCHES:-40}       # batches of 64 held-out sequences (the model card used 40)
CHECKPOINT_EVERY=${CHECKPOINT_EVERY:-1000}
NUM_WORKERS=${NUM_WORKERS:-4}          # processes preparing batches ahead
DEVICE=${DEVICE:-auto}
# model: the bundled minibert-gutenberg's shape
LAYERS=${LAYERS:-6}
HIDDEN=${HIDDEN:-256}
HEADS=${HEADS:-4}
INTERMEDIATE=${INTERMEDIATE:-1024}
VOCAB_SIZE=${VOCAB_SIZE:-12000}
# data
CORPUS=${CORPUS:-../shared/data/corpus}
HELDOUT=${HELDOUT:-"pg11_ pg84_ pg1661_"}
SST2=${SST2:-../shared/data/sst2}
# fine-tuning (the SST-2 command of docs/results.md 4.1), one run per seed
FT_EPOCHS=${FT_EPOCHS:-2}
FT_LR=${FT_LR:-5e-5}
FT_BATCH=${FT_BATCH:-32}
FT_MAX_SEQ_LEN=${FT_MAX_SEQ_LEN:-66}
FT_SEEDS=${FT_SEEDS:-"0 1 2"}
FT_MAX_TRAIN_EXAMPLES=${FT_MAX_TRAIN_EXAMPLES:-}   # empty: all 67,349
OUT=${OUT:-runs/compare-deberta-bert}
PYTHON=${PYTHON:-python}
# -------------------------------------------------------------------------------

ARCHS="bert deberta"
mkdir -p "$OUT"

echo "== 1. vocabulary and token caches ($OUT/prep)"
if [ ! -f "$OUT/prep/vocab.txt" ]; then
    # shellcheck disable=SC2086  # HELDOUT is a list of names
    "$PYTHON" train_mlm.py --corpus "$CORPUS" --heldout $HELDOUT --vocab-size "$VOCAB_SIZE" \
        --max-seq-len "$MAX_SEQ_LEN" --steps 0 --device cpu --quiet --output "$OUT/prep"
fi

for ARCH in $ARCHS; do
    echo "== 2. pretrain $ARCH ($OUT/$ARCH/model)"
    if [ ! -f "$OUT/$ARCH/pretrain.json" ]; then
        # --resume: continue a killed run (or start from step 0 when there is no checkpoint yet)
        # shellcheck disable=SC2086
        "$PYTHON" train_mlm.py --arch "$ARCH" --corpus "$CORPUS" --heldout $HELDOUT \
            --vocab "$OUT/prep/vocab.txt" --cache-dir "$OUT/prep/cache" \
            --layers "$LAYERS" --hidden "$HIDDEN" --heads "$HEADS" --intermediate "$INTERMEDIATE" \
            --max-seq-len "$MAX_SEQ_LEN" --batch-size "$BATCH" --steps "$STEPS" --warmup "$WARMUP" --lr "$LR" \
            --seed "$SEED" --pair-objective none --eval-every "$EVAL_EVERY" --eval-batches "$EVAL_BATCHES" \
            --checkpoint-every "$CHECKPOINT_EVERY" --num-workers "$NUM_WORKERS" --device "$DEVICE" --quiet \
            --resume --output "$OUT/$ARCH/model" --json "$OUT/$ARCH/pretrain.json"
    fi
done

for ARCH in $ARCHS; do
    for FT_SEED in $FT_SEEDS; do
        RUN="$OUT/$ARCH/sst2-seed$FT_SEED"
        echo "== 4. fine-tune $ARCH on SST-2, seed $FT_SEED ($RUN)"
        if [ ! -f "$RUN.json" ]; then
            RESUME=()
            if [ -f "$RUN/checkpoint.pt" ]; then RESUME=(--resume); fi
            LIMIT=()
            if [ -n "$FT_MAX_TRAIN_EXAMPLES" ]; then LIMIT=(--max-train-examples "$FT_MAX_TRAIN_EXAMPLES"); fi
            "$PYTHON" finetune.py --task sst2 --model "$OUT/$ARCH/model" --train "$SST2/train.tsv" \
                --eval "$SST2/dev.tsv" --epochs "$FT_EPOCHS" --lr "$FT_LR" --batch-size "$FT_BATCH" \
                --max-seq-len "$FT_MAX_SEQ_LEN" --seed "$FT_SEED" --device "$DEVICE" --quiet \
                ${LIMIT[@]+"${LIMIT[@]}"} ${RESUME[@]+"${RESUME[@]}"} --output "$RUN" --json "$RUN.json"
        fi
    done
done

echo "== 5. results"
"$PYTHON" - "$OUT" "$FT_SEEDS" <<'EOF'
import json
import statistics
import sys
from pathlib import Path

out, seeds = Path(sys.argv[1]), sys.argv[2].split()
rows = {}
for arch in ("bert", "deberta"):
    pretrain = json.loads((out / arch / "pretrain.json").read_text())
    heldout = pretrain.get("heldout", {})
    sst2 = [json.loads((out / arch / f"sst2-seed{s}.json").read_text())["best"]["accuracy"] for s in seeds]
    rows[arch] = dict(parameters=pretrain["parameters"], steps=pretrain["end_step"], seconds=pretrain["seconds"],
                      tokens=pretrain["tokens_seen"], accuracy=heldout.get("masked_accuracy", float("nan")),
                      perplexity=heldout.get("perplexity", float("nan")),
                      masked=heldout.get("masked_tokens", 0), sst2=sst2)
config = json.loads((out / "bert" / "pretrain.json").read_text())["run_config"]
print(f"\nBERT vs DeBERTa, the same recipe: {config['total_steps']:,} steps of batch {config['batch_size']} x "
      f"{config['max_seq_len']}, seed {config['seed']}, lr {config['learning_rate']}; held out: "
      f"{', '.join(Path(f).stem for f in config['heldout'])}")
header = (f"{'model':8s} {'parameters':>10s} {'steps':>6s} {'pretrain s':>10s} {'held-out acc':>12s} "
          f"{'perplexity':>10s} {'SST-2 dev acc':>15s}  per seed ({' '.join(seeds)})")
print(header)
print("-" * len(header))
for arch, r in rows.items():
    sst2 = f"{statistics.mean(r['sst2']):.2f}"
    if len(r["sst2"]) > 1:
        sst2 += f" +- {statistics.stdev(r['sst2']):.2f}"
    print(f"{arch:8s} {r['parameters']:10,d} {r['steps']:6,d} {r['seconds']:10.0f} {r['accuracy']:11.2f}% "
          f"{r['perplexity']:10.2f} {sst2:>15s}  {' '.join(f'{a:.2f}' for a in r['sst2'])}")
print(f"held-out accuracy and perplexity: train_mlm's evaluation at the last step, over "
      f"{rows['bert']['masked']:,} masked tokens (the same for both); SST-2: the best epoch's dev accuracy, "
      f"mean (+- sample std) over fine-tuning seeds")
(out / "results.json").write_text(json.dumps(rows, indent=2) + "\n")
EOF
