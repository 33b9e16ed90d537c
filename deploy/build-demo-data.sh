#!/usr/bin/env bash
# Builds the demo corpus and tokenizer that the README job and the worker tests train on.
#
#   deploy/build-demo-data.sh OUT_DIR
#
# Input: Debian's `fortunes` package (/usr/share/games/fortunes, freely licensed short texts). Every
# file there without a .dat/.u8 suffix is a list of documents separated by lines holding only `%`.
# Output, in OUT_DIR:
#   fortunes.jsonl        training split, one {"text": ...} per fortune
#   fortunes-valid.jsonl  held-out split (every 50th document)
#   fortunes.model/.vocab SentencePiece BPE model trained on the training split
#
# Reproducible: documents are shuffled with a fixed seed (so that a short run sees every category,
# not just the alphabetically first file) and spm_train runs single-threaded with fixed settings.
# Idempotent: nothing is rebuilt while the outputs are newer than this script and the inputs.
set -euo pipefail

if [ $# -ne 1 ]; then
  echo "usage: $0 OUT_DIR" >&2
  exit 2
fi
OUT_DIR=$1
FORTUNES_DIR=${FLAME_FORTUNES_DIR:-/usr/share/games/fortunes}
VOCAB_SIZE=2048
HOLDOUT_EVERY=50
SHUFFLE_SEED=1234

if [ ! -d "$FORTUNES_DIR" ]; then
  echo "build-demo-data: $FORTUNES_DIR not found; install the Debian package 'fortunes'" >&2
  exit 1
fi
command -v spm_train >/dev/null || {
  echo "build-demo-data: spm_train not found; install the Debian package 'sentencepiece'" >&2
  exit 1
}

mapfile -t SOURCES < <(find "$FORTUNES_DIR" -maxdepth 1 -type f ! -name '*.dat' ! -name '*.u8' | sort)
if [ ${#SOURCES[@]} -eq 0 ]; then
  echo "build-demo-data: no fortune files in $FORTUNES_DIR" >&2
  exit 1
fi

OUTPUTS=("$OUT_DIR/fortunes.jsonl" "$OUT_DIR/fortunes-valid.jsonl" "$OUT_DIR/fortunes.model")
up_to_date() {
  local out input
  for out in "${OUTPUTS[@]}"; do
    [ -f "$out" ] || return 1
    for input in "$0" "${SOURCES[@]}"; do
      [ "$out" -nt "$input" ] || return 1
    done
  done
}
if up_to_date; then
  echo "build-demo-data: $OUT_DIR is up to date"
  exit 0
fi

mkdir -p "$OUT_DIR"
tmp=$(mktemp -d "$OUT_DIR/.build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

# Split, clean and JSON-encode with Python's json module (correct escaping of quotes, backslashes
# and control characters). Some fortunes use terminal overstriking ("_\bx" underlines, "x\bx"
# bold): the struck-over character is dropped, leaving the visible one.
python3 - "$tmp" "$HOLDOUT_EVERY" "$SHUFFLE_SEED" "${SOURCES[@]}" <<'PY'
import json, random, re, sys

out_dir, holdout_every, seed, sources = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]
overstrike = re.compile(r".\x08")
control = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")

docs = []
for path in sources:
    with open(path, "rb") as f:
        text = f.read().decode("utf-8", errors="replace")
    current = []
    for line in text.split("\n") + ["%"]:
        if line.rstrip("\r") == "%":
            doc = control.sub("", overstrike.sub("", "\n".join(current))).strip()
            if doc:
                docs.append(doc)
            current = []
        else:
            current.append(line.rstrip("\r"))

random.Random(seed).shuffle(docs)
train = [d for i, d in enumerate(docs) if i % holdout_every != holdout_every - 1]
valid = [d for i, d in enumerate(docs) if i % holdout_every == holdout_every - 1]
for name, split in (("fortunes.jsonl", train), ("fortunes-valid.jsonl", valid)):
    with open(f"{out_dir}/{name}", "w", encoding="utf-8") as f:
        for doc in split:
            f.write(json.dumps({"text": doc}, ensure_ascii=False) + "\n")
# spm_train reads one sentence per line: a document with its line breaks turned into spaces.
with open(f"{out_dir}/spm-input.txt", "w", encoding="utf-8") as f:
    for doc in train:
        f.write(" ".join(doc.split("\n")) + "\n")
print(f"build-demo-data: {len(docs)} documents ({len(train)} train, {len(valid)} held out)")
PY

# Llama-style special ids (unk 0, bos 1, eos 2, no pad) and byte fallback, as flame's tokenizers.
spm_train \
  --input="$tmp/spm-input.txt" \
  --model_prefix="$tmp/fortunes" \
  --model_type=bpe \
  --vocab_size=$VOCAB_SIZE \
  --character_coverage=1.0 \
  --byte_fallback=true \
  --split_digits=true \
  --unk_id=0 --bos_id=1 --eos_id=2 --pad_id=-1 \
  --max_sentence_length=16384 \
  --shuffle_input_sentence=false \
  --num_threads=1 \
  >"$tmp/spm_train.log" 2>&1 || {
    cat "$tmp/spm_train.log" >&2
    echo "build-demo-data: spm_train failed" >&2
    exit 1
  }

for name in fortunes.jsonl fortunes-valid.jsonl fortunes.vocab fortunes.model; do
  mv -f "$tmp/$name" "$OUT_DIR/$name"
done
echo "build-demo-data: wrote $OUT_DIR/fortunes.{jsonl,model} (vocab $VOCAB_SIZE)"
