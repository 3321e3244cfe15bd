import sys, time, torch, itertools, contextlib
sys.path.insert(0, "code")  # run from the repository root
from transformer_book import set_seed
from transformer_book.config import TransformerConfig
from transformer_book.data import load_multi30k
from transformer_book.tokenizer import load_or_train_tokenizer
from transformer_book.train import TrainStep, make_optimizer, prepare_corpus
from transformer_book.model import Transformer
from torch.nn.attention import sdpa_kernel, SDPBackend
torch.set_num_threads(int(sys.argv[3]) if len(sys.argv) > 3 else 2)
train = load_multi30k("train")
variants = eval(sys.argv[1])
setups = []
for v in variants:
    tok = load_or_train_tokenizer(train, vocab_size=v.get("vocab", 8000))
    data = prepare_corpus(tok, train, v.get("max_tokens", 1500), max_len=100)
    batches = list(itertools.islice(data.batches(0), 200))
    cfg = TransformerConfig.cpu(src_vocab_size=tok.vocab_size, tgt_vocab_size=tok.vocab_size,
        pad_id=tok.pad_id, num_layers=v.get("layers", 3), d_ff=v.get("d_ff", 1024), d_model=v.get("d_model",256), dropout=v.get("dropout", 0.1))
    set_seed(0); m = Transformer(cfg)
    opt, sch = make_optimizer(m, cfg.d_model, 200, 0.45)
    st = TrainStep(m, opt, sch, label_smoothing=0.1, pad_id=tok.pad_id,
                   amp_dtype=torch.bfloat16 if v.get("amp") else None)
    setups.append((v, st, batches))
n = int(sys.argv[2])
res = {i: [] for i in range(len(setups))}
sents = {i: 0 for i in range(len(setups))}
for r in range(3):
    for i, (v, st, b) in enumerate(setups):
        ctx = sdpa_kernel(SDPBackend.MATH) if v.get("math") else contextlib.nullcontext()
        with ctx:
            float(st(b[0]))
            t = time.perf_counter(); ns = 0
            for bb in b[1 + r * n: 1 + (r + 1) * n]:
                st(bb); ns += bb.src.shape[0]
            res[i].append(ns / (time.perf_counter() - t))
for i, (v, _, b) in enumerate(setups):
    print(v, "sentences/s rounds:", [round(x, 1) for x in res[i]], "best", round(max(res[i]), 1), flush=True)
