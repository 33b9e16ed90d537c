#!/usr/bin/env python3
"""Token ids from the reference tokenizers, for tokenizer_reference_test.cc.

    tokenizer_reference.py hf|spm TOKENIZER TEXTS_JSONL OUT

hf:  `tokenizers` (the library behind Hugging Face's fast tokenizers) on a tokenizer.json, with
     special tokens added as transformers' tokenizer(text) adds them.
spm: `sentencepiece` on a .model file, with BOS first as flame's Llama-style tokenizers do.
TEXTS_JSONL has one JSON string per line; OUT gets one JSON list of ids per line.
"""
import json
import sys


def main():
    kind, model, texts_path, out_path = sys.argv[1:5]
    with open(texts_path, encoding="utf-8") as f:
        texts = [json.loads(line) for line in f]
    if kind == "hf":
        from tokenizers import Tokenizer
        tokenizer = Tokenizer.from_file(model)
        ids = [tokenizer.encode(text, add_special_tokens=True).ids for text in texts]
    elif kind == "spm":
        import sentencepiece
        processor = sentencepiece.SentencePieceProcessor(model_file=model)
        bos = [processor.bos_id()] if processor.bos_id() >= 0 else []
        ids = [bos + processor.encode(text) for text in texts]
    else:
        sys.exit(f"unknown kind {kind!r} (expected hf or spm)")
    with open(out_path, "w", encoding="utf-8") as f:
        for row in ids:
            f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
