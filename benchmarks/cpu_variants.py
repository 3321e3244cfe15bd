"""Which environment settings change PyTorch's arithmetic on this machine, the way another CPU would.

A reader's CPU runs other vector kernels (PyTorch's ATen dispatch: AVX-512, AVX2 or none; MKL and
oneDNN pick their own code paths by processor) and another number of threads, so the last bits of
a float, and then the outcome of a training run, differ from machine to machine. `make
nbval-othercpu` re-runs every chapter with settings that imitate that; this script measures which
settings actually change results here, so that the Makefile uses those.

Each setting runs the same probes in a fresh process (the settings are read at start-up):
  lstsq      a least-squares fit (LAPACK through MKL), its residual's bits;
  matmul     a 256x256 float32 product summed (BLAS, and the reduction's order);
  softmax    softmax + log over a (64, 1000) float32 tensor (ATen's vectorised kernels);
  training   60 Adam steps (transformer_book.step.TrainStep) of a tiny Transformer on a copy
             task, the last loss's bits.
and the table says, per setting, which probes' bits differ from the run without any setting
(a second run without any setting shows which probes are not even repeatable).

    python benchmarks/cpu_variants.py            # ~1 minute on 2 cores
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

SETTINGS = [
    {},
    {"_again": "1"},  # the machine's own once more: a probe that changes here is noise, not a setting
    {"ATEN_CPU_CAPABILITY": "default"},
    {"ATEN_CPU_CAPABILITY": "avx2"},
    {"MKL_CBWR": "COMPATIBLE"},
    {"MKL_CBWR": "AVX2"},
    {"MKL_ENABLE_INSTRUCTIONS": "SSE4_2"},
    {"MKL_ENABLE_INSTRUCTIONS": "AVX2"},
    {"ONEDNN_MAX_CPU_ISA": "SSE41"},
    {"ONEDNN_MAX_CPU_ISA": "AVX2"},
    {"OMP_NUM_THREADS": "1"},
    # what `make nbval-othercpu` sets
    {"ATEN_CPU_CAPABILITY": "default", "MKL_CBWR": "COMPATIBLE", "OMP_NUM_THREADS": "1"},
]

PROBES = r'''
import json, torch, torch.nn.functional as F
from transformer_book import set_seed
from transformer_book.batching import Batch
from transformer_book.config import TransformerConfig
from transformer_book.model import Transformer
from transformer_book.step import TrainStep

out = {"capability": torch.backends.cpu.get_cpu_capability(), "threads": torch.get_num_threads()}
pos = torch.arange(10, dtype=torch.float64)[:, None]
A = torch.cat([torch.sin(pos / 10000 ** (torch.arange(0, 64, 2) / 64)),
               torch.cos(pos / 10000 ** (torch.arange(0, 64, 2) / 64))], dim=1)
b = torch.sin(pos[:, 0] * 0.37 + 1.0)
x = torch.linalg.lstsq(A, b[:, None]).solution
out["lstsq"] = float((A @ x - b[:, None]).abs().max()).hex()
g = torch.Generator().manual_seed(0)
m = torch.randn(256, 256, generator=g)
out["matmul"] = float((m @ m).sum()).hex()
s = torch.randn(64, 1000, generator=g)
out["softmax"] = float(torch.log(F.softmax(s * 3, dim=-1) + 1e-9).sum()).hex()
set_seed(0)
V = 13
model = Transformer(TransformerConfig.tiny(src_vocab_size=V, tgt_vocab_size=V, max_len=32))
opt = torch.optim.Adam(model.parameters(), lr=3e-3, betas=(0.9, 0.98), eps=1e-9)
step = TrainStep(model, opt, label_smoothing=0.0, pad_id=0)  # the package's step, plain CE
for _ in range(60):
    src = torch.randint(3, V, (32, 6), generator=g)
    dec = torch.cat([torch.ones(32, 1, dtype=torch.long), src], dim=1)
    tgt = torch.cat([src, torch.full((32, 1), 2)], dim=1)
    loss = step(Batch(src, dec, tgt))
out["training"] = float(loss).hex()
print(json.dumps(out))
'''


def run(setting: dict[str, str]) -> dict:
    env = {k: v for k, v in os.environ.items()
           if k not in {"ATEN_CPU_CAPABILITY", "MKL_CBWR", "MKL_ENABLE_INSTRUCTIONS",
                        "ONEDNN_MAX_CPU_ISA", "OMP_NUM_THREADS"}}
    env.update(setting)
    done = subprocess.run([sys.executable, "-c", PROBES], env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"probe failed under {setting}: {done.stderr.strip().splitlines()[-1]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    import platform

    import torch

    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
          f"torch {torch.__version__}")
    base = run({})
    probes = ["lstsq", "matmul", "softmax", "training"]
    print(f"{'setting':70s} {'ATen':8s} thr  changed probes")
    for setting in SETTINGS:
        result = base if not setting else run(setting)
        changed = [p for p in probes if result[p] != base[p]]
        name = " ".join(f"{k}={v}" for k, v in setting.items()) or "(none: the machine's own)"
        if "_again" in setting:
            name = "(none, a second process: run-to-run noise)"
        print(f"{name:70s} {result['capability']:8s} {result['threads']:3d}  "
              f"{', '.join(changed) or '-'}")


if __name__ == "__main__":
    main()
