#!/usr/bin/env python3
"""Checks that HF transformers + fla load a flame export and compute our logits.

Run on a machine with torch, transformers and fla (a GPU host: fla's kernels are Triton):

    flame-worker export --checkpoint <dump>/checkpoint/step-N --config <config.json> \
        --output <dir> --reference-logits
    python3 tests/worker/fla_load_check.py <dir> [--device cuda] [--tolerance 1e-3] [--dtype bfloat16]

The export folder holds model.safetensors and config.json, and (with --reference-logits)
input_ids.npy (int64 [B, T]) and expected_logits.npy (float32 [B, T, V]): the ids and the logits
flame-worker computed for them with the exported weights. This script loads the folder with
AutoModelForCausalLM after `import fla` (which registers fla's model types), runs the same ids in
float32 and compares. The error is max |ours - theirs| / max |ours|, so that logits near zero do
not inflate it. Exit status: 0 within tolerance, 1 above it, 2 bad input.
"""

import argparse
import os
import sys


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("export_dir", help="folder written by `flame-worker export`")
    parser.add_argument("--device", default="cuda", help="torch device (default: cuda)")
    parser.add_argument("--tolerance", type=float, default=1e-3,
                        help="largest accepted relative error (default: 1e-3)")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"],
                        help="dtype fla runs in (its chunk_delta_rule refuses float32; in "
                             "bfloat16 give a tolerance of a few 1e-2)")
    args = parser.parse_args()

    needed = ["config.json", "model.safetensors", "input_ids.npy", "expected_logits.npy"]
    missing = [name for name in needed if not os.path.isfile(os.path.join(args.export_dir, name))]
    if missing:
        print(f"{args.export_dir}: missing {', '.join(missing)} "
              "(export with --reference-logits)", file=sys.stderr)
        return 2

    import numpy as np
    import torch
    import fla  # noqa: F401  (registers fla's configs and models with transformers)
    from transformers import AutoModelForCausalLM

    ids = np.load(os.path.join(args.export_dir, "input_ids.npy"))
    expected = np.load(os.path.join(args.export_dir, "expected_logits.npy"))
    if ids.ndim != 2 or expected.shape[:2] != ids.shape:
        print(f"input_ids {ids.shape} and expected_logits {expected.shape} do not match",
              file=sys.stderr)
        return 2

    dtype = getattr(torch, args.dtype)
    model = AutoModelForCausalLM.from_pretrained(args.export_dir, dtype=dtype)
    model = model.to(args.device).eval()
    # TF32 matmuls would add ~1e-3 of error on their own; the check is about the weights.
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    with torch.no_grad():
        logits = model(input_ids=torch.from_numpy(ids).to(args.device)).logits
    theirs = logits.float().cpu().numpy()
    if theirs.shape != expected.shape:
        print(f"fla's logits have shape {theirs.shape}, ours {expected.shape}", file=sys.stderr)
        return 1

    difference = np.abs(theirs - expected)
    scale = float(np.abs(expected).max())
    error = float(difference.max()) / max(scale, 1e-30)
    worst = np.unravel_index(int(difference.argmax()), difference.shape)
    print(f"{type(model).__name__}: max relative error {error:.3e} "
          f"(max abs {float(difference.max()):.3e} at {tuple(int(i) for i in worst)}, "
          f"logit scale {scale:.3e}, tolerance {args.tolerance:g})")
    return 0 if error <= args.tolerance else 1


if __name__ == "__main__":
    sys.exit(main())
