import json, re, statistics
from pathlib import Path
RESULTS = Path("../benchmarks/results")
CPU_RUN, H100_RUN = RESULTS / "cpu-2026-11-24", RESULTS / "h100-2026-11-22"
STORED=True
def stored_json(p): return json.loads(p.read_text())
src = open('/tmp/ch10/cells.py').read()
import ast
# extract the two GPU cells' code strings
blocks = re.findall(r"code\(r'''\n(.*?)'''", src, re.S)
for b in blocks:
    if "gpu_run = stored_json" in b or "def stored_steps" in b:
        exec(b)
