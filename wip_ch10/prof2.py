import sys, time, torch
from torch.profiler import profile, schedule, ProfilerActivity
from transformer_book import benchmark
from transformer_book.batching import Batch
from transformer_book.config import TransformerConfig
from transformer_book.model import Transformer
from transformer_book.train import TrainStep, make_optimizer

threads = int(sys.argv[1]); B = int(sys.argv[2]); L = int(sys.argv[3])
torch.set_num_threads(threads)
cfg = TransformerConfig.cpu(src_vocab_size=8000, tgt_vocab_size=8000)
torch.manual_seed(0)
model = Transformer(cfg)
opt, sch = make_optimizer(model, cfg.d_model, 200)
step = TrainStep(model, opt, sch, label_smoothing=0.1, pad_id=0)
batches = [Batch(*benchmark.synthetic_batch(B, L, L, cfg.tgt_vocab_size, seed=s)) for s in range(2)]
t0 = time.perf_counter()
with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=1, warmup=1, active=2)) as prof:
    for i in range(4):
        float(step(batches[i % 2]))
        prof.step()
el = time.perf_counter() - t0
ka = sorted(prof.key_averages(), key=lambda e: -e.self_cpu_time_total)
tot = sum(e.self_cpu_time_total for e in ka)
share = lambda names: sum(e.self_cpu_time_total for e in ka if e.key in names) / tot
mat = share({"aten::mm", "aten::addmm", "aten::bmm"})
print(f"t={threads} B={B} L={L} {el:.1f}s matmul {mat:.0%} drop {share({'aten::bernoulli_'}):.0%} top:",
      " | ".join(f"{e.key.replace('aten::','')} {e.self_cpu_time_total/tot:.0%}" for e in ka[:5]), flush=True)
