# throughput of the cpu preset's TrainStep, eager vs torch.compile (dynamic shapes), on real batches
import sys, time, torch, itertools
sys.path.insert(0, "code")  # run from the repository root
from transformer_book import set_seed
from transformer_book.config import TransformerConfig
from transformer_book.data import load_multi30k
from transformer_book.tokenizer import load_or_train_tokenizer
from transformer_book.train import TrainStep, make_optimizer, prepare_corpus
from transformer_book.model import Transformer
torch.set_num_threads(2)
train = load_multi30k("train")
tok = load_or_train_tokenizer(train, vocab_size=8000)
data = prepare_corpus(tok, train, 1500, max_len=100)
batches = list(itertools.islice(data.batches(0), 200))
cfg = TransformerConfig.cpu(src_vocab_size=8000, tgt_vocab_size=8000, pad_id=tok.pad_id)
amp = torch.bfloat16 if "bf16" in sys.argv else None
def make(compile):
    set_seed(0); m = Transformer(cfg)
    opt, sch = make_optimizer(m, 256, 200, 0.45)
    return TrainStep(m, opt, sch, label_smoothing=0.1, pad_id=tok.pad_id, amp_dtype=amp, compile=compile)
steps = {"eager": make(False), "compiled": make(True)}
t = time.perf_counter(); n = 0
for b in batches[:60]:
    steps["compiled"](b); n += 1
print(f"compile warm-up: 60 steps in {time.perf_counter() - t:.0f} s", flush=True)
for r in range(3):
    for name, st in steps.items():
        t = time.perf_counter(); tk = 0
        for b in batches[60 + r * 30: 90 + r * 30]:
            st(b); tk += b.num_tgt_tokens
        print(name, r, round(tk / (time.perf_counter() - t)), "tok/s", flush=True)
