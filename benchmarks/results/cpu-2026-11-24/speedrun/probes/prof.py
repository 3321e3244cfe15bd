import sys, time, torch, itertools
sys.path.insert(0, "code")  # run from the repository root
from transformer_book import set_seed
from transformer_book.config import TransformerConfig
from transformer_book.data import load_multi30k
from transformer_book.tokenizer import load_or_train_tokenizer
from transformer_book.train import TrainStep, make_optimizer, prepare_corpus
from transformer_book.model import Transformer
from torch.profiler import profile, ProfilerActivity
torch.set_num_threads(2)
train = load_multi30k("train")
tok = load_or_train_tokenizer(train, vocab_size=8000)
data = prepare_corpus(tok, train, 1500, max_len=100)
batches = list(itertools.islice(data.batches(0), 40))
cfg = TransformerConfig.cpu(src_vocab_size=8000, tgt_vocab_size=8000, pad_id=tok.pad_id)
amp = torch.bfloat16 if "bf16" in sys.argv else None
set_seed(0); m = Transformer(cfg)
opt, sch = make_optimizer(m, 256, 200, 0.45)
st = TrainStep(m, opt, sch, label_smoothing=0.1, pad_id=tok.pad_id, amp_dtype=amp)
for b in batches[:5]: st(b)
print("mean real tgt tokens per batch", sum(b.num_tgt_tokens for b in batches)/len(batches), "padded", sum(b.tgt_in.numel() for b in batches)/len(batches), "src", sum(b.src.numel() for b in batches)/len(batches))
with profile(activities=[ProfilerActivity.CPU]) as prof:
    for b in batches[5:25]: st(b)
print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25, max_name_column_width=40))
