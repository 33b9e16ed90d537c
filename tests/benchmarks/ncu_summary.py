#!/usr/bin/env python3
"""Summarises an ncu report's exports for tuning the chunk kernels (ncu_profile.sh writes them).

  ncu_summary.py DETAILS.txt SOURCE.csv [top]

DETAILS.txt: `ncu --page details --print-details all`; the lines kept are the ones that say
whether a kernel is bound by memory, by issue or by latency (durations are at ncu's locked base
clocks unless it ran with --clock-control none). SOURCE.csv: `ncu --page source --print-source
sass --csv`, per kernel: the opcode mix weighted by executions and by stall samples, how many
instructions run how often (a loop's body shows as one count), and the `top` most-stalled
instructions.
"""
import collections
import csv
import re
import sys

KEEP = re.compile(
    r"^\s+(Duration|DRAM Throughput|L2 Cache Throughput|L1/TEX Cache Throughput|"
    r"Compute \(SM\) Throughput|Registers Per Thread|Achieved Occupancy|Issued Warp Per Scheduler|"
    r"Active Warps Per Scheduler|Eligible Warps Per Scheduler|Local Memory Spilling Requests|"
    r"Instructions Executed|Stall [A-Za-z ]+?)\s{2,}(\S*)\s+([\d.,]+)\s*$")


def details(path):
    kernel, seen = None, set()
    for line in open(path, errors="replace"):
        if re.match(r"^  \S.*\(\d+, \d+, \d+\)x\(\d+, \d+, \d+\)", line):
            kernel, seen = line.strip().split("(")[0], set()
            print(f"== {kernel}")
            continue
        m = KEEP.match(line)
        if m and kernel and m.group(1) not in seen and m.group(3) not in ("0", "0.00"):
            seen.add(m.group(1))
            print(f"  {m.group(1):40s} {m.group(3)} {m.group(2)}")


def number(x):
    try:
        return int(x.replace(",", ""))
    except ValueError:
        return 0


def source(path, top):
    """One summary per kernel: the export lists each as a "Kernel Name" row, a header, its SASS."""
    kernels, rows = [], None
    for r in csv.reader(open(path, errors="replace")):
        if r and r[0] == "Kernel Name":
            rows = []
            kernels.append((r[1] if len(r) > 1 else "?", rows))
        elif rows is not None:
            rows.append(r)
    done = set()
    for name, rows in kernels:
        if name in done:  # the export can list a kernel twice
            continue
        done.add(name)
        print(f"== SASS of {re.sub(r'[(].*', '', name)[-90:]}")
        kernel_source(rows, top)


def kernel_source(rows, top):
    header = next(r for r in rows if "Source" in r and "Instructions Executed" in r)
    at = {name: header.index(name) for name in
          ("Address", "Source", "Instructions Executed", "Warp Stall Sampling (All Samples)")}
    seen, insts = set(), []
    for r in rows:
        if len(r) != len(header) or not r[at["Address"]].startswith("0x"):
            continue
        if r[at["Address"]] in seen:  # an export can list an instruction twice
            continue
        seen.add(r[at["Address"]])
        insts.append((r[at["Address"]], r[at["Source"]].strip(),
                      number(r[at["Instructions Executed"]]),
                      number(r[at["Warp Stall Sampling (All Samples)"]])))
    executed = sum(i[2] for i in insts) or 1
    samples = sum(i[3] for i in insts) or 1
    ops_exec, ops_stall = collections.Counter(), collections.Counter()
    for _, src, e, s in insts:
        words = src.split()
        if not words:
            continue
        op = (words[1] if words[0].startswith("@") and len(words) > 1 else words[0]).split(".")[0]
        ops_exec[op] += e
        ops_stall[op] += s
    print(f"{executed} warp instructions executed, {samples} stall samples")
    print("opcode      % executed  % stall samples")
    for op, e in ops_exec.most_common(20):
        print(f"  {op:10s} {100 * e / executed:6.1f}   {100 * ops_stall[op] / samples:6.1f}")
    # Instructions by how often each ran: a loop body shows as a block of one count.
    counts = collections.Counter(e for _, _, e, _ in insts if e)
    print("executions per instruction: instructions, % of executed, % of stall samples")
    for e, n in sorted(counts.items(), key=lambda kv: -kv[0] * kv[1])[:8]:
        stall = sum(s for _, _, x, s in insts if x == e)
        print(f"  {e:>12d} x {n:5d}  {100 * e * n / executed:5.1f}%  {100 * stall / samples:5.1f}%")
    print(f"the {top} most-stalled instructions (samples, executions, address, SASS)")
    for address, src, e, s in sorted(insts, key=lambda i: -i[3])[:top]:
        print(f"  {s:6d} {e:12d} {address[-5:]}  {src[:80]}")


if __name__ == "__main__":
    details(sys.argv[1])
    if len(sys.argv) > 2:
        source(sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 25)
