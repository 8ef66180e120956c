"""What only a CUDA machine can check: the package's GPU paths against its CPU paths.

Each part prints one line per check (``ok`` or ``FAIL`` with the figures) and goes on after a
failure, so one run shows every problem:

1. engine: marginals, entropy and the MAP tree of batched random graphs (float64 and float32,
   plain and peaked scores) on CUDA against the CPU;
2. spaCy: the shipped pipeline with ``spacy.require_gpu()`` (thinc on CuPy, the BiLSTM and the
   engine on CUDA) against the same pipeline on the CPU, on the texts of a CoNLL-U file: same
   trees, ``head_prob`` within 1e-4, samples are trees; then its words/s on both devices;
3. spaCy, ``tree_expectations(device="cuda")`` behind the CPU parser: same ``head_prob``;
4. Stanza: ``pipeline_from_dir(..., use_gpu=True)`` on a folder of Stanza models against the CPU;
5. a stock pipeline (``--stock``) with ``add_uncertainty(overwrite=False)`` on the GPU against
   the CPU: its own annotations unchanged, the same UD tree and ``head_prob``.

Usage (on the GPU machine; the test suite's ``-m cuda`` tests are run beside it):
    python benchmarks/cuda_check.py --conllu tests/fixtures/eval_20.conllu \
        --stanza-dir tests/fixtures/stanza/tiny
"""

from __future__ import annotations

import argparse
import time
import traceback
from typing import Callable, List

import numpy
import torch

from spacy_treexp.io import read_conllu

FAILURES: List[str] = []


def check(name: str, ok: bool, detail: str = "") -> None:
    print(f"{'ok  ' if ok else 'FAIL'} {name} {detail}", flush=True)
    if not ok:
        FAILURES.append(name)


def part(name: str, body: Callable[[], None]) -> None:
    print(f"\n== {name}", flush=True)
    try:
        body()
    except Exception:  # one broken part must not hide the others
        traceback.print_exc()
        FAILURES.append(name)


def engine() -> None:
    from spacy_treexp.engine import TreeDistribution

    gen = torch.Generator().manual_seed(0)
    for dtype in (torch.float64, torch.float32):
        for scale in (1.0, 30.0):
            scores = (torch.randn(16, 41, 41, generator=gen, dtype=torch.float64) * scale).to(dtype)
            lengths = torch.randint(2, 41, (16,), generator=gen)
            cpu = TreeDistribution(scores, lengths)
            gpu = TreeDistribution(scores.cuda(), lengths.cuda())
            gap = (cpu.marginals - gpu.marginals.cpu()).abs().max().item()
            ent = (cpu.entropy() - gpu.entropy().cpu()).abs().max().item()
            same_map = torch.equal(cpu.mode, gpu.mode.cpu())
            tol = 1e-9 if dtype == torch.float64 else 2e-4
            check(
                f"engine {dtype} x{scale:g}",
                gap < tol and same_map and bool(torch.isfinite(gpu.marginals).all()),
                f"max|dmu|={gap:.1e} max|dH|={ent:.1e} same MAP={same_map}",
            )


def read_texts(path: str) -> List[str]:
    """Each sentence of a CoNLL-U file as its words joined by spaces."""
    return [" ".join(sentence.forms) for sentence in read_conllu(path)]


def shipped(**tree_options: object):
    """The shipped pipeline with ``tree_expectations`` (these options) at its end."""
    import spacy_treexp

    nlp = spacy_treexp.load()
    nlp.add_pipe("tree_expectations", config=tree_options)
    return nlp


def heads_and_probs(docs) -> tuple[List[int], numpy.ndarray]:
    heads = [tok.head.i for doc in docs for tok in doc]
    probs = numpy.array([tok._.head_prob for doc in docs for tok in doc], dtype=float)
    return heads, probs


def words_per_second(nlp, texts: List[str], repeats: int) -> float:
    list(nlp.pipe(texts[:8]))
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        list(nlp.pipe(texts, batch_size=256))
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - start)
    return sum(len(t.split()) for t in texts) / best


def spacy_gpu(conllu: str, copies: int) -> None:
    import spacy

    texts = read_texts(conllu)
    cpu_nlp = shipped()
    cpu_docs = list(cpu_nlp.pipe(texts))
    speed_texts = texts * copies
    cpu_speed = words_per_second(cpu_nlp, speed_texts, 2)

    check("spacy.require_gpu", bool(spacy.require_gpu()))
    gpu_nlp = shipped(n_samples=4)
    gpu_docs = list(gpu_nlp.pipe(texts))
    cpu_heads, cpu_probs = heads_and_probs(cpu_docs)
    gpu_heads, gpu_probs = heads_and_probs(gpu_docs)
    agree = sum(a == b for a, b in zip(cpu_heads, gpu_heads))
    gap = float(numpy.abs(cpu_probs - gpu_probs).max())
    check("spacy GPU pipeline trees", agree == len(cpu_heads), f"{agree}/{len(cpu_heads)} heads agree")
    check("spacy GPU pipeline head_prob", gap < 1e-3, f"max|d head_prob|={gap:.1e}")
    tags = sum(a.tag_ == b.tag_ and a.lemma_ == b.lemma_ for x, y in zip(cpu_docs, gpu_docs) for a, b in zip(x, y))
    check("spacy GPU tags and lemmas", tags == len(cpu_heads), f"{tags}/{len(cpu_heads)}")
    trees = all(
        sorted(int(h) for h in row if int(h) == 0) == [0]
        for doc in gpu_docs
        for record in doc._.tree_expectations
        for row in record.sampled_heads
    )
    check("spacy GPU samples have one root", trees)
    gpu_speed = words_per_second(gpu_nlp, speed_texts, 2)
    print(
        f"words/s on {len(speed_texts)} texts: CPU {cpu_speed:,.0f} ({torch.get_num_threads()} threads), "
        f"GPU {gpu_speed:,.0f} ({torch.cuda.get_device_name()}): {gpu_speed / cpu_speed:.1f}x"
    )
    bf16 = shipped()
    bf16.get_pipe("biaffine_parser").encoder_precision = "bfloat16"
    bf16_heads, bf16_probs = heads_and_probs(list(bf16.pipe(texts)))
    same = sum(a == b for a, b in zip(gpu_heads, bf16_heads))
    check("spacy GPU bfloat16 encoder", same >= 0.98 * len(gpu_heads), f"{same}/{len(gpu_heads)} heads as float32")
    print(f"bfloat16 encoder words/s: GPU {words_per_second(bf16, speed_texts, 2):,.0f}")


def engine_device_behind_cpu_parser(conllu: str) -> None:
    from thinc.api import require_cpu

    require_cpu()
    texts = read_texts(conllu)
    cpu_heads, cpu_probs = heads_and_probs(list(shipped().pipe(texts)))
    nlp = shipped(device="cuda")
    gpu_heads, gpu_probs = heads_and_probs(list(nlp.pipe(texts)))
    gap = float(numpy.abs(cpu_probs - gpu_probs).max())
    check("tree_expectations device=cuda", gap < 1e-4 and cpu_heads == gpu_heads, f"max|d head_prob|={gap:.1e}")


def stanza_gpu(folder: str) -> None:
    from spacy_treexp.stanza import pipeline_from_dir

    text = "\n".join(
        [
            "The dog saw a cat with the telescope .",
            "Mary will find the old letter in the garden near the river behind the house , and the teacher laughed .",
            "These quiet students read the strange book on the table with every small child in London !",
        ]
    )
    docs = []
    for use_gpu in (False, True):
        nlp = pipeline_from_dir(folder, use_gpu=use_gpu, depparse_resolve_head_constraints=False, logging_level="WARN")
        docs.append(nlp(text))
    cpu, gpu = (numpy.array([w.head_prob for s in d.sentences for w in s.words], dtype=float) for d in docs)
    same = [w.head for s in docs[0].sentences for w in s.words] == [w.head for s in docs[1].sentences for w in s.words]
    gap = float(numpy.abs(cpu - gpu).max())
    check("stanza use_gpu=True", same and gap < 1e-4, f"same heads={same} max|d head_prob|={gap:.1e}")


def stock_gpu(conllu: str, stock: str) -> None:
    """The stock route (``add_uncertainty``) on a GPU against the CPU: the host's own
    annotations and the hosted parser's UD tree and ``head_prob``."""
    import spacy
    from thinc.api import require_cpu

    import spacy_treexp

    texts = read_texts(conllu)
    runs = []
    for gpu in (False, True):
        if gpu:
            check("spacy.require_gpu (stock)", bool(spacy.require_gpu()))
        else:
            require_cpu()
        nlp = spacy_treexp.add_uncertainty(spacy.load(stock, exclude=["ner"]), overwrite=False)
        docs = list(nlp.pipe(texts))
        runs.append(
            (
                [(t.tag_, t.lemma_, t.dep_, t.head.i, t.is_sent_start) for d in docs for t in d],
                [t._.ud_head.i for d in docs for t in d],
                numpy.array([t._.head_prob for d in docs for t in d], dtype=float),
            )
        )
    (cpu_stock, cpu_ud, cpu_p), (gpu_stock, gpu_ud, gpu_p) = runs
    same = sum(a == b for a, b in zip(cpu_stock, gpu_stock))
    check("stock annotations on the GPU", same == len(cpu_stock), f"{same}/{len(cpu_stock)} tokens")
    agree = sum(a == b for a, b in zip(cpu_ud, gpu_ud))
    gap = float(numpy.abs(cpu_p - gpu_p).max())
    check(
        "stock + parser UD tree on the GPU",
        agree == len(cpu_ud) and gap < 1e-3,
        f"{agree}/{len(cpu_ud)} heads, max|dp|={gap:.1e}",
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--conllu", required=True, help="texts (gold tokens) for the spaCy checks")
    parser.add_argument("--stanza-dir", help="a folder of Stanza models (pipeline_from_dir)")
    parser.add_argument("--stock", help="a stock pipeline (name or folder) for add_uncertainty, loaded without ner")
    parser.add_argument("--copies", type=int, default=20, help="words/s: the texts this many times over")
    parser.add_argument("--threads", type=int, default=4)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, {torch.cuda.get_device_name()}")
    part("engine on CUDA", engine)
    part("tree_expectations on CUDA behind the CPU parser", lambda: engine_device_behind_cpu_parser(args.conllu))
    if args.stanza_dir:
        part("Stanza on CUDA", lambda: stanza_gpu(args.stanza_dir))
    part("spaCy pipeline on the GPU", lambda: spacy_gpu(args.conllu, args.copies))
    if args.stock:
        part("a stock pipeline with the parser on the GPU", lambda: stock_gpu(args.conllu, args.stock))
    print(f"\n{len(FAILURES)} failed: {FAILURES}" if FAILURES else "\nall passed")


if __name__ == "__main__":
    main()
