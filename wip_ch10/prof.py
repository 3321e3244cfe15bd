import sys, time, torch
from torch.profiler import profile, schedule, ProfilerActivity
import transformer_book
from transformer_book import benchmark
from transformer_book.batching import Batch
from transformer_book.config import TransformerConfig
from transformer_book.model import Transformer
from transformer_book.train import TrainStep, make_optimizer

threads = int(sys.argv[1]); which = sys.argv[2]
torch.set_num_threads(threads)
if which == "tiny":
    cfg = benchmark.matched_configs(TransformerConfig.tiny(src_vocab_size=1000, tgt_vocab_size=1000, dropout=0.1))
    B, S, T = 16, 16, 16
elif which == "cpu":
    cfg = TransformerConfig.cpu(src_vocab_size=8000, tgt_vocab_size=8000)
    B, S, T = 100, 15, 15
elif which == "cpu_m":
    cfg = benchmark.matched_configs(TransformerConfig.cpu(src_vocab_size=8000, tgt_vocab_size=8000))
    B, S, T = 100, 15, 15
torch.manual_seed(0)
model = Transformer(cfg)
opt, sch = make_optimizer(model, cfg.d_model, 200)
step = TrainStep(model, opt, sch, label_smoothing=0.1, pad_id=0)
batches = [Batch(*benchmark.synthetic_batch(B, S, T, cfg.tgt_vocab_size, seed=s)) for s in range(4)]
t0 = time.perf_counter()
with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=1, warmup=2, active=3)) as prof:
    for i in range(6):
        float(step(batches[i % 4]))
        prof.step()
el = time.perf_counter() - t0
ka = sorted(prof.key_averages(), key=lambda e: -e.self_cpu_time_total)
tot = sum(e.self_cpu_time_total for e in ka)
print(which, threads, f"{el:.1f}s", " | ".join(f"{e.key.replace('aten::','')} {e.self_cpu_time_total/tot:.0%}" for e in ka[:6]))
