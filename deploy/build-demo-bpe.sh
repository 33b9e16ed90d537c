#!/usr/bin/env bash
# Trains the demo byte-level BPE tokenizers (Hugging Face tokenizer.json) on the demo corpus.
#
#   deploy/build-demo-bpe.sh DATA_DIR PYTHON_DIR
#
# DATA_DIR holds fortunes.jsonl (deploy/build-demo-data.sh); PYTHON_DIR is where
# deploy/install-deps.sh put the pinned `tokenizers` package. Output, in DATA_DIR:
#   fortunes-gpt2/tokenizer.json     GPT-2-style: ByteLevel pre-tokenizer with GPT-2's regex and a
#                                    prefix space, "<s> $A" template, a "<mask>" that swallows the
#                                    space before it, merges written "a b" as older files do
#   fortunes-llama3/tokenizer.json   Llama-3-style: NFC, Split on Llama 3's regex then ByteLevel
#                                    without regex, "<|begin_of_text|> $A" template inside a
#                                    Sequence, ignore_merges, merges written [a, b]
#   fortunes-llama3/tokenizer_config.json   names the BOS and EOS tokens
# Both are small (vocab 2048) and deterministic (one training thread). Idempotent like
# build-demo-data.sh.
set -euo pipefail

if [ $# -ne 2 ]; then
  echo "usage: $0 DATA_DIR PYTHON_DIR" >&2
  exit 2
fi
DATA_DIR=$1
PYTHON_DIR=$2
CORPUS="$DATA_DIR/fortunes.jsonl"
OUTPUTS=("$DATA_DIR/fortunes-gpt2/tokenizer.json" "$DATA_DIR/fortunes-llama3/tokenizer.json")

[ -f "$CORPUS" ] || { echo "build-demo-bpe: $CORPUS missing (run build-demo-data.sh)" >&2; exit 1; }
up_to_date() {
  local out
  for out in "${OUTPUTS[@]}"; do
    [ -f "$out" ] && [ "$out" -nt "$0" ] && [ "$out" -nt "$CORPUS" ] || return 1
  done
}
if up_to_date; then
  echo "build-demo-bpe: $DATA_DIR is up to date"
  exit 0
fi

tmp=$(mktemp -d "$DATA_DIR/.bpe.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
export PYTHONPATH="$PYTHON_DIR${PYTHONPATH:+:$PYTHONPATH}" RAYON_NUM_THREADS=1
fail() {
  echo "build-demo-bpe: training failed (is the pinned tokenizers in $PYTHON_DIR?" \
    "deploy/install-deps.sh installs it)" >&2
  exit 1
}
python3 - "$CORPUS" "$tmp" <<'PY' || fail
import json, os, sys
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers
from tokenizers import pre_tokenizers, processors, trainers

corpus, out = sys.argv[1], sys.argv[2]
with open(corpus, encoding="utf-8") as f:
    texts = [json.loads(line)["text"] for line in f if line.strip()]

LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
                  r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def train(tokenizer, specials):
    trainer = trainers.BpeTrainer(vocab_size=2048, special_tokens=specials, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.train_from_iterator(texts, trainer)
    return tokenizer


def save(tokenizer, folder, edit):
    os.makedirs(f"{out}/{folder}")
    data = json.loads(tokenizer.to_str())
    edit(data)
    path = f"{out}/{folder}/tokenizer.json"
    with open(path, "w", encoding="utf-8") as f:
        json.dump(data, f, ensure_ascii=False, indent=1)
    Tokenizer.from_file(path).encode("check that the edited file loads")


gpt2 = Tokenizer(models.BPE())
gpt2.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True, use_regex=True)
train(gpt2, ["<s>", "<pad>", "</s>", "<unk>"])
gpt2.add_special_tokens([AddedToken("<mask>", lstrip=True, normalized=False)])
gpt2.post_processor = processors.TemplateProcessing(
    single="<s> $A", pair="<s> $A </s> $B", special_tokens=[("<s>", 0), ("</s>", 2)])


def legacy_merges(data):
    data["model"]["merges"] = [" ".join(pair) for pair in data["model"]["merges"]]


save(gpt2, "fortunes-gpt2", legacy_merges)

llama3 = Tokenizer(models.BPE(ignore_merges=True))
llama3.normalizer = normalizers.NFC()
llama3.pre_tokenizer = pre_tokenizers.Sequence([
    pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated", invert=False),
    pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False)])
specials = ["<|begin_of_text|>", "<|end_of_text|>"] + [
    f"<|reserved_special_token_{i}|>" for i in range(4)]
train(llama3, specials)
llama3.post_processor = processors.Sequence([
    processors.ByteLevel(trim_offsets=False),
    processors.TemplateProcessing(single="<|begin_of_text|> $A",
                                  pair="<|begin_of_text|> $A <|begin_of_text|> $B:1",
                                  special_tokens=[("<|begin_of_text|>", 0)])])


def keep_ignore_merges(data):
    data["model"]["ignore_merges"] = True  # training resets it; Llama 3's files set it


save(llama3, "fortunes-llama3", keep_ignore_merges)
with open(f"{out}/fortunes-llama3/tokenizer_config.json", "w", encoding="utf-8") as f:
    json.dump({"bos_token": "<|begin_of_text|>", "eos_token": "<|end_of_text|>",
               "tokenizer_class": "PreTrainedTokenizerFast"}, f, indent=1)
print("build-demo-bpe: trained fortunes-gpt2 and fortunes-llama3 (vocab 2048)")
PY

for folder in fortunes-gpt2 fortunes-llama3; do
  rm -rf "$DATA_DIR/$folder"
  mv "$tmp/$folder" "$DATA_DIR/$folder"
done
