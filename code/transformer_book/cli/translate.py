"""``python -m transformer_book translate``: German lines on stdin to English lines on stdout
(beam 4, length penalty 0.6 by default, Sec. 6.1); its decoding flags and checks serve ``bleu``."""

from __future__ import annotations

import io
import os
import sys
from pathlib import Path

from transformer_book.cli.common import (
    CLIError,
    UsageError,
    add_common,
    check_device,
    number_in,
    positive_int,
    warn,
)


def add_decoding_flags(p) -> None:
    p.add_argument("--checkpoint", required=True, help="a last.pt written by `train`")
    p.add_argument("--beam-size", type=positive_int, default=4,
                   help="1 = greedy (default: 4, Sec. 6.1); at most the vocabulary size, and "
                   "refused when its estimated memory exceeds half of what is available")
    p.add_argument("--length-penalty", type=number_in("[0, inf)"), default=0.6,
                   help="alpha (0.6, Sec. 6.1)")
    p.add_argument("--max-tokens", type=number_in("[2, inf)", int), default=4096,
                   help="padded source tokens per batch")
    add_common(p)


def add_parser(sub) -> None:
    p = sub.add_parser("translate", help="translate German lines from stdin to English on stdout",
                       description="Translate German lines from stdin (UTF-8) to English on "
                       "stdout, one output line per input line, in order. An empty line gives "
                       "an empty line; a line longer than the model takes is truncated, with a "
                       "warning naming it.")
    add_decoding_flags(p)
    p.add_argument("--invalid-utf8", choices=("error", "replace"), default="error",
                   help="bytes that are not UTF-8: stop with an error naming the line "
                   "(default), or replace them with U+FFFD and warn")


def read_checkpoint(args):
    """The model, tokenizer and checkpoint of ``--checkpoint``, on ``--device``."""
    from transformer_book.checkpoint import model_from_checkpoint

    path = Path(args.checkpoint)
    if not path.exists():
        raise UsageError(f"--checkpoint {path}: no such file")
    if path.is_dir():
        hint = f"; did you mean {path / 'last.pt'}?" if (path / "last.pt").is_file() else ""
        raise UsageError(f"--checkpoint {path}: is a folder, not a checkpoint file{hint}")
    check_device(args.device)
    return model_from_checkpoint(args.checkpoint, args.device)


def available_memory(device) -> int | None:
    """Bytes free for a new allocation on ``device`` (GPU memory, or the smaller of the
    machine's available memory and the cgroup limit); None when unknown."""
    import torch

    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    sizes = []
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    sizes.append(int(line.split()[1]) * 1024)
    except OSError:
        try:
            sizes.append(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
        except (ValueError, OSError, AttributeError):
            pass
    try:  # a container's limit (cgroup v2)
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        if limit != "max":
            used = int(Path("/sys/fs/cgroup/memory.current").read_text())
            sizes.append(int(limit) - used)
    except (OSError, ValueError):
        pass
    return min(sizes) if sizes else None


def check_beam(args, model, longest: int) -> int | None:
    """Refuse a beam larger than the vocabulary, or one whose decoding of the longest input
    sentence (``longest`` tokens) needs more than half of the available memory; return the
    memory budget of a batch (None: unknown)."""
    from transformer_book.evaluation import decode_memory_bytes

    config, device = model.config, next(model.parameters()).device
    if args.beam_size > config.tgt_vocab_size:
        raise UsageError(f"--beam-size {args.beam_size}: more beams than the model's "
                         f"{config.tgt_vocab_size} target tokens; use a beam of at most "
                         f"{config.tgt_vocab_size} (the paper uses 4)")
    available = available_memory(device)
    if available is None:
        return None
    budget = available // 2
    need = decode_memory_bytes(config, longest, args.beam_size)
    if need > budget:
        per_beam = decode_memory_bytes(config, longest, 1)
        raise UsageError(f"--beam-size {args.beam_size}: decoding a sentence of {longest} "
                         f"tokens would need about {need / 2**30:.1f} GiB, more than half of "
                         f"the {available / 2**30:.1f} GiB available on {device}; use "
                         f"--beam-size {max(1, budget // per_beam)} or less (the paper uses 4)")
    return budget


def read_lines(stream, invalid: str = "error") -> list[str]:
    """The lines of a binary stream decoded as UTF-8 (:func:`~transformer_book.files.utf8_lines`);
    bytes that are not UTF-8 give a :class:`CLIError` (``invalid="error"``), or U+FFFD and a
    warning per line (``"replace"``)."""
    from transformer_book.files import NotUTF8Error, utf8_lines

    raw = stream.read()
    if isinstance(raw, str):  # a text stream (already decoded), e.g. in tests
        raw = raw.encode("utf-8", errors="surrogateescape")

    def replaced(number: int) -> None:
        warn("translate", f"stdin line {number}: bytes that are not UTF-8 replaced by U+FFFD")

    try:
        return list(utf8_lines(io.BytesIO(raw), errors="strict" if invalid == "error" else
                               "replace", replaced=replaced))
    except NotUTF8Error as e:
        raise CLIError(f"stdin line {e.line}: byte {e.byte:#04x} at column {e.column} is not "
                       "UTF-8; convert the input to UTF-8 (e.g. iconv -f latin1 -t utf-8), or "
                       "pass --invalid-utf8 replace to replace such bytes") from None


def run(args) -> int:
    from transformer_book.evaluation import source_token_limit, translate

    model, tokenizer, _ = read_checkpoint(args)
    lines = read_lines(getattr(sys.stdin, "buffer", sys.stdin), args.invalid_utf8)
    limit = source_token_limit(model, args.max_tokens)
    lengths = [len(ids) for ids in tokenizer.encode_batch(lines)]
    for number, n in enumerate(lengths, 1):
        if n > limit:
            warn("translate", f"stdin line {number}: {n} subword tokens, more than the {limit} "
                 f"the model takes (max_len {model.config.max_len}, --max-tokens "
                 f"{args.max_tokens}); translated its first {limit} tokens only")
    longest = min(max(lengths, default=1), limit) + 1
    budget = check_beam(args, model, longest)
    outputs = translate(model, tokenizer, lines, beam_size=args.beam_size,
                        length_penalty=args.length_penalty, max_tokens=args.max_tokens,
                        truncate=True, memory_budget=budget)
    assert len(outputs) == len(lines)
    text = "".join(o.replace("\n", " ") + "\n" for o in outputs)
    if hasattr(sys.stdout, "buffer"):  # UTF-8 whatever the locale
        sys.stdout.flush()
        sys.stdout.buffer.write(text.encode("utf-8"))
    else:
        sys.stdout.write(text)
    sys.stdout.flush()
    return 0
