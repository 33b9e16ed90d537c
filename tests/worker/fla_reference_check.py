#!/usr/bin/env python3
"""Compares flame's CPU reference ops with fla's own naive implementations.

flame_reference_fixtures (tests/worker/reference_fixtures.cc) writes seeded float32 inputs and
our outputs (o, final state ht) for chunk GLA, simple GLA, the delta rule and the gated delta rule
into one folder. This script loads them, runs fla's naive functions on the same inputs and prints,
per op and output, the max relative error max|ours - fla| / max|fla|. It exits 1 when any error
is above the tolerance (1e-4), 2 when fla or a fixture cannot be loaded.

Needs Python torch and the fla wheels (pip install --no-deps fla_core-*.whl
flash_linear_attention-*.whl); einops when present (a local rearrange stands in
for it otherwise). Runs on the CPU; no GPU is used.

    python3 tests/worker/fla_reference_check.py FIXTURE_DIR
"""

import argparse
import importlib
import importlib.util
import os
import sys

TOLERANCE = 1e-4


def rearrange(x, pattern, **sizes):
    """The subset of einops.rearrange that fla's naive code uses (named axes, one level of
    parenthesised groups, '...'), for hosts without einops (the GPU host has no network)."""
    def parse(side):
        groups, group = [], None
        for token in side.replace("(", " ( ").replace(")", " ) ").split():
            if token == "(":
                group = []
            elif token == ")":
                groups.append(group)
                group = None
            elif group is not None:
                group.append(token)
            else:
                groups.append([token])
        return groups

    def expand(groups, ellipsis_dims):
        out = []
        for group in groups:
            if group == ["..."]:
                out.extend([[f"...{i}"] for i in range(ellipsis_dims)])
            else:
                out.append(group)
        return out

    left, right = (parse(side) for side in pattern.split("->"))
    ellipsis_dims = x.dim() - (len(left) - (1 if ["..."] in left else 0))
    left, right = expand(left, ellipsis_dims), expand(right, ellipsis_dims)
    size = dict(sizes)
    for group, extent in zip(left, x.shape):
        known = 1
        for axis in group:
            known *= size.get(axis, 1)
        unknown = [axis for axis in group if axis not in size]
        if unknown:
            size[unknown[0]] = extent // known
    order = [axis for group in left for axis in group]
    x = x.reshape([size[axis] for axis in order])
    x = x.permute([order.index(axis) for group in right for axis in group])
    shape = []
    for group in right:
        extent = 1
        for axis in group:
            extent *= size[axis]
        shape.append(extent)
    return x.reshape(shape)


def provide_einops():
    """fla's naive modules import einops.rearrange; stand in for it when einops is missing."""
    if importlib.util.find_spec("einops") is not None and not os.environ.get("FLA_CHECK_NO_EINOPS"):
        return
    import types
    shim = types.ModuleType("einops")
    shim.rearrange = rearrange
    sys.modules["einops"] = shim
    print("fla_reference_check: einops not used; a local rearrange stands in", file=sys.stderr)


def load_naive(module):
    """Imports fla.ops.<module>.naive; falls back to the file itself when importing the fla
    package fails (its __init__ pulls in every Triton kernel, which the naive code never needs)."""
    name = f"fla.ops.{module}.naive"
    try:
        return importlib.import_module(name)
    except Exception as package_error:  # noqa: BLE001 - reported below if the fallback fails too
        spec = importlib.util.find_spec("fla")
        if spec is None or not spec.submodule_search_locations:
            raise SystemExit(f"fla is not installed ({package_error})")
        path = os.path.join(spec.submodule_search_locations[0], "ops", module, "naive.py")
        file_spec = importlib.util.spec_from_file_location(name, path)
        loaded = importlib.util.module_from_spec(file_spec)
        try:
            file_spec.loader.exec_module(loaded)
        except Exception as file_error:  # noqa: BLE001
            raise SystemExit(f"cannot load {name}: {package_error}; from {path}: {file_error}")
        return loaded


def max_relative_error(ours, theirs):
    ours = ours.double().cpu()
    theirs = theirs.double().cpu()
    if ours.shape != theirs.shape:
        raise SystemExit(f"shape mismatch: ours {tuple(ours.shape)} vs fla {tuple(theirs.shape)}")
    return ((ours - theirs).abs().max() / theirs.abs().max().clamp_min(1e-30)).item()


def check_gla(f, naive):
    # naive_recurrent_gla(q, k, v, gk, initial_state, output_final_state): [B, T, H, K] layout,
    # scale fixed at K^-1/2 (the fixture uses the same).
    o, ht = naive.naive_recurrent_gla(f["q"], f["k"], f["v"], f["g"], initial_state=f["h0"],
                                      output_final_state=True)
    return {"naive_recurrent_gla": (o, ht)}


def check_simple_gla(f, naive):
    # [B, T, H, K] layout, g [B, T, H], explicit scale.
    scale = f["scale"].item()
    o, ht = naive.naive_recurrent_simple_gla(f["q"], f["k"], f["v"], f["g"], scale=scale,
                                             initial_state=f["h0"].clone(),
                                             output_final_state=True)
    results = {"naive_recurrent_simple_gla": (o, ht)}
    o, ht = naive.naive_chunk_simple_gla(f["q"], f["k"], f["v"], f["g"],
                                         initial_state=f["h0"].clone(), output_final_state=True,
                                         scale=scale)
    results["naive_chunk_simple_gla"] = (o, ht)
    return results


def check_delta_rule(f, naive):
    # delta_rule_recurrence(q, k, v, beta, initial_state, output_final_state) takes the head-first
    # layout [B, H, T, D] and beta [B, H, T], and fixes the scale at K^-1/2; q and k in the fixture
    # are already L2-normalised (fla's naive code does not normalise them).
    def head_first(x):
        return x.transpose(1, 2).contiguous()

    o, ht = naive.delta_rule_recurrence(head_first(f["q"]), head_first(f["k"]),
                                        head_first(f["v"]), head_first(f["beta"]),
                                        initial_state=f["h0"].clone(), output_final_state=True)
    return {"delta_rule_recurrence": (o.transpose(1, 2), ht)}


def check_gated_delta_rule(f, naive):
    # naive_recurrent_gated_delta_rule(q, k, v, beta, g, scale, initial_state, output_final_state)
    # and naive_chunk_gated_delta_rule(q, k, v, g, beta, chunk_size, scale, ...): [B, T, H, D].
    scale = f["scale"].item()
    o, ht = naive.naive_recurrent_gated_delta_rule(f["q"], f["k"], f["v"], f["beta"], f["g"],
                                                   scale=scale, initial_state=f["h0"].clone(),
                                                   output_final_state=True)
    results = {"naive_recurrent_gated_delta_rule": (o, ht)}
    o, ht = naive.naive_chunk_gated_delta_rule(f["q"], f["k"], f["v"], f["g"], f["beta"],
                                               chunk_size=64, scale=scale,
                                               initial_state=f["h0"].clone(),
                                               output_final_state=True)
    results["naive_chunk_gated_delta_rule"] = (o, ht)
    return results


CHECKS = [
    ("gla", "gla", check_gla),
    ("simple_gla", "simple_gla", check_simple_gla),
    ("delta_rule", "delta_rule", check_delta_rule),
    ("gated_delta_rule", "gated_delta_rule", check_gated_delta_rule),
]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("fixture_dir", help="folder written by flame_reference_fixtures")
    args = parser.parse_args()
    try:
        import torch
    except ImportError:
        print("fla_reference_check: needs Python torch", file=sys.stderr)
        return 2
    provide_einops()

    # LibTorch's pickler tags the dict with its static type (Dict[str, Tensor]); the tag is a plain
    # identity function, safe to allow for weights-only loading.
    import torch.jit._pickle
    torch.serialization.add_safe_globals([torch.jit._pickle.restore_type_tag])

    worst = 0.0
    failed = []
    for fixture_name, module, check in CHECKS:
        path = os.path.join(args.fixture_dir, fixture_name + ".pt")
        try:
            fixture = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as error:  # noqa: BLE001
            print(f"fla_reference_check: cannot load {path}: {error}", file=sys.stderr)
            return 2
        with torch.no_grad():
            results = check(fixture, load_naive(module))
        for function, (o, ht) in results.items():
            for output, theirs in (("o", o), ("ht", ht)):
                error = max_relative_error(fixture[output], theirs)
                worst = max(worst, error)
                verdict = "ok" if error <= TOLERANCE else "FAIL"
                print(f"{fixture_name:18s} {function:34s} {output:2s} "
                      f"max rel error {error:.3e}  {verdict}")
                if error > TOLERANCE:
                    failed.append(f"{fixture_name}/{function}/{output}")
    print(f"worst {worst:.3e} (tolerance {TOLERANCE:g})")
    if failed:
        print("above tolerance: " + ", ".join(failed), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
