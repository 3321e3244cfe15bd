import sys, time, torch, itertools
sys.path.insert(0, "code")  # run from the repository root
from transformer_book import set_seed
from transformer_book.config import TransformerConfig
from transformer_book.data import load_multi30k
from transformer_book.tokenizer import load_or_train_tokenizer
from transformer_book.train import TrainStep, make_optimizer, prepare_corpus
torch.set_num_threads(2)
train = load_multi30k("train")
variants = eval(sys.argv[1])  # list of dicts: vocab, layers, d_ff, amp, max_tokens
setups = []
for v in variants:
    tok = load_or_train_tokenizer(train, vocab_size=v.get("vocab", 8000))
    data = prepare_corpus(tok, train, v.get("max_tokens", 1500), max_len=100)
    batches = list(itertools.islice(data.batches(0), 400))
    cfg = TransformerConfig.cpu(src_vocab_size=tok.vocab_size, tgt_vocab_size=tok.vocab_size,
        pad_id=tok.pad_id, num_layers=v.get("layers", 3), d_ff=v.get("d_ff", 1024), d_model=v.get("d_model",256))
    set_seed(0)
    from transformer_book.model import Transformer
    m = Transformer(cfg)
    opt, sch = make_optimizer(m, cfg.d_model, 200, 0.45)
    st = TrainStep(m, opt, sch, label_smoothing=0.1, pad_id=tok.pad_id,
                   amp_dtype=torch.bfloat16 if v.get("amp") else None)
    setups.append((v, st, batches))
n = int(sys.argv[2]) if len(sys.argv) > 2 else 20
res = {i: [] for i in range(len(setups))}
for r in range(3):
    for i, (v, st, b) in enumerate(setups):
        float(st(b[0]))
        t = time.perf_counter(); tok = 0
        for bb in b[1 + r * n: 1 + (r + 1) * n]:
            st(bb); tok += bb.num_tgt_tokens
        res[i].append(tok / (time.perf_counter() - t))
for i, (v, _, b) in enumerate(setups):
    print(v, "tgt tok/s rounds:", [round(x) for x in res[i]], flush=True)
