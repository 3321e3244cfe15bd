"""Where ``train`` reads its sentence pairs (Sec. 5.1 trained on WMT 2014; the book on Multi30k):
Multi30k (the default), your own four parallel text files (``--train-src`` ... ``--valid-tgt``),
or a Hugging Face dataset (``--hf-dataset``): the flags, their checks, and the loading."""

from __future__ import annotations

from pathlib import Path

from transformer_book.cli.common import UsageError, check_data_dir, flag_name

CORPUS_FLAGS = ("train_src", "train_tgt", "valid_src", "valid_tgt")
HF_FLAGS = ("hf_dataset", "hf_config", "hf_src", "hf_tgt", "hf_split", "hf_valid_split")


def add_corpus_flags(p) -> None:
    p.add_argument("--data-dir", help="folder with the Multi30k .gz files (default: $MULTI30K_DIR, "
                   "else download into the user cache)")
    c = p.add_argument_group("your own corpus (instead of Multi30k; all four files, one sentence "
                             "per line, UTF-8, line counts matching)")
    for name in CORPUS_FLAGS:
        c.add_argument(flag_name(name), metavar="FILE")
    h = p.add_argument_group("a Hugging Face dataset (instead of Multi30k; streamed; needs "
                             "pip install 'transformer-book[hf]')")
    h.add_argument("--hf-dataset", metavar="NAME", help="e.g. wmt/wmt14, or a local folder (written "
                   "by save_to_disk, or of data files such as train.jsonl)")
    h.add_argument("--hf-config", metavar="CONFIG", help="e.g. de-en (which also gives the "
                   "languages: de -> en)")
    h.add_argument("--hf-src", metavar="LANG", help="source language key (default: the "
                   "config's first)")
    h.add_argument("--hf-tgt", metavar="LANG", help="target language key (default: the "
                   "config's second)")
    h.add_argument("--hf-split", metavar="SPLIT", help="training split (train)")
    h.add_argument("--hf-valid-split", metavar="SPLIT", help="validation split (validation)")


def _hf_dataset(args) -> dict[str, str | None] | None:
    """--hf-dataset and its settings, defaults filled in (a local folder as an absolute path)."""
    given = {k: getattr(args, k, None) for k in HF_FLAGS}
    if not given["hf_dataset"]:
        stray = [k for k, v in given.items() if v]
        if stray and not args.resume:  # (with --resume: checked against the run's settings)
            raise UsageError(f"{flag_name(stray[0])}: only with --hf-dataset")
        return None
    from transformer_book.data import CorpusError
    from transformer_book.hf_dataset import languages

    try:
        given["hf_src"], given["hf_tgt"] = languages(given["hf_config"], given["hf_src"],
                                                     given["hf_tgt"])
    except CorpusError as e:
        raise UsageError(f"--hf-src/--hf-tgt: {e}") from None
    if Path(given["hf_dataset"]).is_dir():
        given["hf_dataset"] = str(Path(given["hf_dataset"]).resolve())
    given["hf_split"] = given["hf_split"] or "train"
    given["hf_valid_split"] = given["hf_valid_split"] or "validation"
    return given


def corpus_files(args) -> dict[str, str] | None:
    """The four parallel text files of --train-src ... --valid-tgt, as absolute paths, or the
    --hf-dataset settings, or None (Multi30k)."""
    check_data_dir(args.data_dir)
    given = {k: getattr(args, k, None) for k in CORPUS_FLAGS}
    hf = _hf_dataset(args)
    if hf is not None and any(given.values()):
        raise UsageError("--hf-dataset and --train-src ...: give one corpus, not both")
    if hf is not None or not any(given.values()):
        files = hf
    else:
        missing = [k for k, v in given.items() if not v]
        if missing:
            flags = ", ".join(flag_name(k) for k in missing)
            raise UsageError(f"{flags}: missing; your own corpus needs all four files (training "
                             "and validation, source and target), or none of them for Multi30k")
        for name, path in given.items():
            if not Path(path).is_file():
                raise UsageError(f"{flag_name(name)} {path}: no such file")
        files = {k: str(Path(v).resolve()) for k, v in given.items()}
    if files is not None and args.data_dir:
        raise UsageError("--data-dir: not used with --train-src ... or --hf-dataset (your own "
                         "corpus); give one or the other")
    return files


def load_corpus(args, files: dict[str, str] | None):
    """(training, validation) corpora: the user's parallel files or Hugging Face dataset (streamed
    pairs), else Multi30k."""
    if files is not None and files.get("hf_dataset"):
        from transformer_book.hf_dataset import hf_translation_pairs

        return tuple(hf_translation_pairs(files["hf_dataset"], files["hf_config"],
                                          split=files[split], src_lang=files["hf_src"],
                                          tgt_lang=files["hf_tgt"])
                     for split in ("hf_split", "hf_valid_split"))
    if files is None:
        from transformer_book.data import load_multi30k

        return load_multi30k("train", args.data_dir), load_multi30k("val", args.data_dir)
    from transformer_book.corpus import load_parallel_text

    return (load_parallel_text(files["train_src"], files["train_tgt"], name="train"),
            load_parallel_text(files["valid_src"], files["valid_tgt"], name="valid"))
