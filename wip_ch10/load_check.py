"""Run the chapter's timing cells (live profile, live ladder, their asserts) once, as a script.
Usage (from /work/main/chapters): python /tmp/ch10/load_check.py  -> prints verdicts, exit 1 on
an assert failure."""
import sys
import time
import traceback

import nbformat

nb = nbformat.read("10_making_training_fast.ipynb", 4)
keys = ["import json", "batches, tokenizer = cpu_ladder.real_batches", "live_profiles = {",
        "fp32_groups = live_profiles", "fused_p, ours_p", "live_rows = cpu_ladder",
        "live = {s[\"rung\"]"]
chosen = []
for key in keys:
    found = [c for c in nb.cells if c.cell_type == "code" and key in c.source]
    assert len(found) == 1, (key, len(found))
    chosen.append(found[0].source)
env = {}
start = time.time()
ok = True
for src in chosen:
    try:
        exec(compile(src, "cell", "exec"), env)
    except AssertionError:
        traceback.print_exc()
        ok = False
print(f"{'OK' if ok else 'FAILED'} in {time.time() - start:.0f} s")
if "live_summary" in env:
    for s in env["live_summary"]:
        print(f"  {s['rung']:24} {s['median_tokens_per_second']:7.0f} tok/s  vs above "
              f"{s.get('vs_above', 1):.2f} [{s.get('vs_above_low', 1):.2f}, "
              f"{s.get('vs_above_high', 1):.2f}]  spread {s['spread']:.0%}")
if "live_profiles" in env:
    lp = env["live_profiles"]
    for name, p in lp.items():
        print(f"  {name:28} " + " ".join(f"{g[:6]}={v / p['total']:.0%}" for g, v in
                                           p["groups"].items()) + f" sdpa_bwd={p['sdpa_backward']:.3f}")
sys.exit(0 if ok else 1)
