"""Writing the evaluation: ``report.json``, ``summary.md`` and PNG plots (matplotlib)."""

from __future__ import annotations

import io
import json
import math
from pathlib import Path
from typing import Any, Dict, List, Optional

from spacy_treexp.io.files import write_atomic

#: The targets of the issue for the default model on EWT test.
TARGETS = {"arc_ece_max": 0.02, "auroc_min": 0.85}


def json_safe(value: Any) -> Any:
    """JSON-safe copy: nan/inf become None, numpy scalars become Python numbers."""
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def targets(quality: Dict[str, Any]) -> Dict[str, Any]:
    """Pass/fail of the issue's targets for one quality block."""
    attachment = quality["attachment"]
    ece = quality["calibration"]["arc"]["ece"]
    auc = quality["error_detection"]["auroc_one_minus_head_prob"]
    return {
        "arc_ece_le_0.02": bool(ece <= TARGETS["arc_ece_max"]) if ece == ece else None,
        "auroc_head_prob_ge_0.85": bool(auc >= TARGETS["auroc_min"]) if auc == auc else None,
        "mbr_uas_ge_map_uas": bool(attachment["uas_mbr"] >= attachment["uas_map"]),
    }


def _save_figure(fig: Any, path: Path, dpi: int) -> None:
    """A PNG written whole or not at all (an interrupted report never leaves half a plot)."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi)
    write_atomic(path, buffer.getvalue())


def write_json(report: Dict[str, Any], path: Path) -> None:
    write_atomic(path, json.dumps(json_safe(report), indent=2, ensure_ascii=False) + "\n")


def _f(value: Optional[float], digits: int = 4) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "–"
    if digits >= 3 and value != 0 and abs(value) < 10 ** -(digits - 1):
        return f"{value:.2e}"
    return f"{value:.{digits}f}"


def _pct(value: Optional[float]) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "–"
    return f"{100 * value:.2f}"


def _interval(value) -> str:
    if not value:
        return "–"
    return f"[{_f(value[0])}, {_f(value[1])}]"


def quality_table(blocks: Dict[str, Dict[str, Any]]) -> List[str]:
    """Markdown rows comparing quality blocks (e.g. raw and temperature-scaled)."""
    names = list(blocks)
    lines = ["| metric | " + " | ".join(names) + " |", "|---|" + "---:|" * len(names)]

    def row(label: str, getter, fmt=_f) -> None:
        values = []
        for name in names:
            try:
                values.append(fmt(getter(blocks[name])))
            except (KeyError, TypeError):
                values.append("–")
        lines.append(f"| {label} | " + " | ".join(values) + " |")

    row("arc temperature T", lambda q: q["arc_temperature"], lambda v: _f(v, 3))
    row("relation temperature T", lambda q: q["rel_temperature"], lambda v: _f(v, 3))
    row("UAS, predicted tree (%)", lambda q: q["attachment"]["uas_map"], _pct)
    row("UAS, MBR tree (%)", lambda q: q["attachment"]["uas_mbr"], _pct)
    row(
        "words where MBR ≠ predicted: predicted right / MBR right",
        lambda q: (
            f"{q['attachment']['map_correct_where_they_differ']} / {q['attachment']['mbr_correct_where_they_differ']} of {q['attachment']['words_where_mbr_differs_from_map']}"
        ),
        str,
    )
    row(
        "  same words, expected right by the model: predicted / MBR",
        lambda q: (
            f"{q['attachment']['map_expected_correct_where_they_differ']:.1f} / {q['attachment']['mbr_expected_correct_where_they_differ']:.1f}"
        ),
        str,
    )
    row("LAS, predicted tree (%)", lambda q: q["attachment"]["las_map"], _pct)
    row("LAS, MBR tree (%)", lambda q: q["attachment"]["las_mbr"], _pct)
    row("LAS, predicted tree, universal labels (%)", lambda q: q["attachment"]["las_map_universal_labels"], _pct)
    row("expected UAS of one sample (%)", lambda q: q["attachment"]["expected_uas_of_a_sample"], _pct)
    row("ECE, head_prob of predicted head, equal-mass bins", lambda q: q["calibration"]["arc"]["ece"])
    row("ECE, every candidate arc, equal-mass bins", lambda q: q["calibration"]["arc_all_candidates"]["ece"])
    row("ECE, labeled arc (dep_prob) vs LAS-correct, equal-mass bins", lambda q: q["calibration"]["labeled_arc"]["ece"])
    row(
        "ECE, p(label | head) on correct heads, equal-mass bins",
        lambda q: q["calibration"]["relation_given_correct_head"]["ece"],
    )
    row("AUROC, 1 − head_prob → wrong head", lambda q: q["error_detection"]["auroc_one_minus_head_prob"])
    row("AUROC, head entropy → wrong head", lambda q: q["error_detection"]["auroc_head_entropy"])
    row(
        "Spearman, entropy/word vs error rate",
        lambda q: q["error_detection"]["spearman_entropy_per_word_vs_error_rate"],
    )
    row("Spearman, entropy/word vs errors", lambda q: q["error_detection"]["spearman_entropy_per_word_vs_errors"])
    row("accuracy, 10% most certain heads (%)", lambda q: q["error_detection"]["accuracy_most_certain"], _pct)
    row("accuracy, 10% least certain heads (%)", lambda q: q["error_detection"]["accuracy_least_certain"], _pct)
    row("95% interval, arc ECE, equal-mass bins (sentence bootstrap)", lambda q: q["bootstrap"]["arc_ece"], _interval)
    row("95% interval, AUROC 1 − head_prob", lambda q: q["bootstrap"]["auroc_one_minus_head_prob"], _interval)
    row(
        "95% interval, UAS MBR − UAS predicted (points)",
        lambda q: [100 * v for v in q["bootstrap"]["uas_mbr_minus_uas_map"]],
        _interval,
    )
    row("gold tree NLL (nats/word)", lambda q: q["likelihood"]["gold_tree_nll_per_word"])
    row("gold label NLL (nats/word)", lambda q: q["likelihood"]["gold_label_nll_per_word"])
    row("entropy (nats/word)", lambda q: q["entropy"]["nats_per_word"])
    row(
        "Z_multi / Z_single = expected tries: mean over sentences",
        lambda q: q["wilson_reject"]["expected_tries_mean"],
        lambda v: _f(v, 3),
    )
    row("Z_multi / Z_single: median", lambda q: q["wilson_reject"]["expected_tries_median"], lambda v: _f(v, 3))
    row("Z_multi / Z_single: max", lambda q: q["wilson_reject"]["expected_tries_max"], lambda v: f"{v:.3g}")
    row("sentences with Z_multi / Z_single > 2", lambda q: q["wilson_reject"]["sentences_expected_tries_over_2"], str)
    row("Wilson-Reject acceptance Z_single / Z_multi, mean", lambda q: q["wilson_reject"]["acceptance_rate_mean"])
    row(
        "Wilson-Reject run: tries per tree, measured",
        lambda q: q["wilson_reject"]["measured_tries_per_tree"],
        lambda v: _f(v, 3),
    )
    row(
        "Wilson-Reject run: expected tries, same sentences",
        lambda q: q["wilson_reject"]["expected_tries_mean_on_sampled"],
        lambda v: _f(v, 3),
    )
    row("Wilson-Reject run: acceptance, measured", lambda q: q["wilson_reject"]["measured_acceptance_rate"])
    row(
        "Wilson-Reject run: sentences left out (walks did not finish)",
        lambda q: q["wilson_reject"]["sentences_not_sampled"],
        str,
    )
    for mode, short in (("with_replacement", "with repl."), ("without_replacement", "w/o repl.")):
        ks: List[int] = next((q["samples"]["ks"] for q in blocks.values() if "samples" in q), [])
        for k in ks:
            row(
                f"oracle UAS, best of {k} ({short}) (%)",
                lambda q, k=k, m=mode: q["samples"][m]["oracle_uas"][str(k)],
                _pct,
            )
        for k in ks:
            row(
                f"distinct trees among {k} ({short})",
                lambda q, k=k, m=mode: q["samples"][m]["distinct_trees_mean"][str(k)],
                lambda v: _f(v, 2),
            )
    return lines


def timing_lines(timing: Dict[str, Any]) -> List[str]:
    lines = [
        "| lengths | sentences | mean length | entropy (nats/word) | T1 engine (ms/sent) | O(n⁴) baseline (ms/sent) | speed-up | batched: T1 / O(n⁴) (ms/sent) | batched speed-up | max abs ΔH |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in timing["rows"] + [timing["all"]]:
        lines.append(
            f"| {row['lengths']} | {row['sentences']} ({row['timed_sentences']} timed) | {_f(row['mean_length'], 1)} | "
            f"{_f(row['entropy_nats_per_word'], 3)} | {_f(row['engine_ms_per_sentence'], 3)} | "
            f"{_f(row['baseline_ms_per_sentence'], 3)} | {_f(row['speedup'], 1)}× | "
            f"{_f(row['engine_batched_ms_per_sentence'], 3)} / {_f(row['baseline_batched_ms_per_sentence'], 3)} | "
            f"{_f(row['batched_speedup'], 1)}× | {row['max_abs_entropy_difference']:.1e} |"
        )
    return lines


def calibration_lines(section: Dict[str, Any]) -> List[str]:
    """Markdown of the calibration block: per variant, overall and per genre, each figure
    with its chance band (the 95th percentile of a perfectly calibrated model's ECE)."""
    test = section["test"]
    genres = sorted({g for table in test.values() for g in table["genres"]})
    lines = [
        f"Confidence in the parser's own head of each word; ECE over {section['n_bins']} equal-width bins, "
        "shown as `ECE [band]` where the band is the 95th percentile of the ECE a perfectly calibrated "
        "model with the same confidences shows by chance (correctness ~ Bernoulli(confidence)); "
        "bootstrap 95 % intervals resample sentences (percentile intervals; ECE is biased upward by sampling "
        "noise, more so in a resample that repeats sentences, so the interval of a small ECE can lie above it: "
        "whether an ECE can be told from perfect calibration is what its band says); an AUROC interval "
        "leaves out the resamples with no wrong head or no right one (the number of the others is `auroc_draws` in report.json), and a "
        "group of one sentence has no intervals.",
        "",
        "| variant | UAS (%) | arc ECE [band] | 95 % interval | labelled ECE [band] | AUROC | 95 % interval | gold-head NLL |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, table in test.items():
        o = table["overall"]
        boot = o.get("bootstrap_95", {})
        lines.append(
            f"| {name} | {_pct(o['uas'])} | {_f(o['arc_ece'])} [{_f(o['arc_ece_chance_band'])}] | "
            f"{_interval(boot.get('arc_ece'))} | {_f(o.get('labeled_ece'))} [{_f(o.get('labeled_ece_chance_band'))}] | "
            f"{_f(o['auroc'])} | {_interval(boot.get('auroc'))} | {_f(o['gold_head_nll'])} |"
        )
    lines += ["", "Per genre, arc ECE [band] / labelled ECE / AUROC:", ""]
    lines += ["| variant | " + " | ".join(genres) + " |", "|---|" + "---:|" * len(genres)]
    for name, table in test.items():
        cells = []
        for genre in genres:
            g = table["genres"].get(genre)
            cells.append(
                "–"
                if g is None
                else f"{_f(g['arc_ece'])} [{_f(g['arc_ece_chance_band'])}] / {_f(g.get('labeled_ece'))} / {_f(g['auroc'], 3)}"
            )
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    if any("bootstrap_95" in g for table in test.values() for g in table["genres"].values()):
        lines += ["", "Per genre, 95 % intervals (sentence bootstrap), arc ECE / AUROC:", ""]
        lines += ["| variant | " + " | ".join(genres) + " |", "|---|" + "---:|" * len(genres)]
        for name, table in test.items():
            boots = [table["genres"].get(genre, {}).get("bootstrap_95") for genre in genres]
            cells = [
                "–" if b is None else f"{_interval(b.get('arc_ece'))} / {_interval(b.get('auroc'))}" for b in boots
            ]
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
    words = {genre: next(iter(test.values()))["genres"][genre]["n_words"] for genre in genres}
    lines += ["", "Words per genre: " + ", ".join(f"{g} {n}" for g, n in words.items()) + "."]
    if section.get("targets"):
        lines += [
            "",
            "Targets of the distance map (fitted on dev): "
            + ", ".join(f"{k}: {v}" for k, v in section["targets"].items()),
        ]
    return lines


def risk_lines(section: Dict[str, Any]) -> List[str]:
    """Markdown of the sentence-risk block: each score's AUROC [95 % interval] overall and per genre."""
    overall = section["all"]
    genre_blocks = section.get("genres", {})
    columns = [("all", overall)] + sorted(genre_blocks.items())
    lines = [
        f'AUROC of each sentence score for "the parser\'s tree has a wrong head" '
        f"({overall['sentences']} sentences, {_pct(overall['with_error'])} % with one), under "
        + ("the pipeline's own map" if section.get("map") else "the raw scores")
        + "; `local_*` are the per-word softmax baselines on the same scores; [95 % interval], "
        "sentence bootstrap.",
        "",
        "| score | " + " | ".join(name for name, _ in columns) + " |",
        "|---|" + "---:|" * len(columns),
    ]
    if not overall["auroc"]:  # every parse right, or every one wrong: nothing to rank
        lines[-2:] = ["No AUROC: every parse is " + ("right." if not overall["with_error"] else "wrong.")]
    for score in overall["auroc"]:
        cells = []
        for _, block in columns:
            row = block["auroc"].get(score)
            cells.append("–" if row is None else f"{_f(row['auroc'], 3)} [{_f(row['low'], 3)}, {_f(row['high'], 3)}]")
        lines.append(f"| {score} | " + " | ".join(cells) + " |")
    left_out = section.get("left_out") or {}
    if left_out:
        missing = ", ".join(f"`{name}` ({count} of {overall['sentences']})" for name, count in left_out.items())
        lines += ["", f"Left out, as some sentences lack them (sentences without): {missing}."]
    return lines


def write_markdown(report: Dict[str, Any], path: Path, plots: List[str]) -> None:
    meta = report["meta"]
    blocks = {"raw scores": report["raw"]}
    if report.get("pipeline_map"):
        blocks[f"the pipeline's own map ({meta.get('pipeline_map')}; what its users get)"] = report["pipeline_map"]
    if report.get("calibrated"):
        blocks["temperature-scaled (T fitted on dev)"] = report["calibrated"]
    lines = [
        "# spacy_treexp evaluation",
        "",
        f"- model: `{meta['model']}`"
        + (f" (`{meta['model_path']}`, components {meta.get('pipeline')})" if meta.get("model_path") else "")
        + (f" (Stanza, {meta['stanza_tags']} POS tags)" if meta.get("stanza_tags") else ""),
        f"- data: `{meta['conllu']}` ({report['raw']['n_sentences']} sentences, {report['raw']['n_words']} words,"
        f" mean length {report['raw']['mean_sentence_length']:.2f}); gold tokenization and gold sentences",
        f"- command: `{meta['command']}`",
        f"- machine: {meta['machine']}; total time {meta['seconds']:.0f} s",
        "",
        "## Quality",
        "",
        *quality_table(blocks),
        "",
        "Targets: " + ", ".join(f"{k}: {v}" for k, v in report["targets"]["raw"].items()),
    ]
    if "pipeline_map" in report["targets"]:
        lines.append(
            "; with the pipeline's own map: "
            + ", ".join(f"{k}: {v}" for k, v in report["targets"]["pipeline_map"].items())
        )
    if "calibrated" in report["targets"]:
        lines.append(
            "; after temperature scaling: " + ", ".join(f"{k}: {v}" for k, v in report["targets"]["calibrated"].items())
        )
    if report.get("temperature"):
        t = report["temperature"]
        lines += [
            "",
            "## Temperature (post-hoc, fitted on dev)",
            "",
            f"Fitted on `{t['dev']}` by minimising the gold-tree NLL (arc) and the gold-label NLL at gold heads (relations).",
        ]
        arc = t["arc"]
        lines.append(
            f"- arc: T = {arc['temperature']:.3f} ({arc['status']}), dev NLL/word {arc['nll_per_word_before']:.4f} → {arc['nll_per_word_after']:.4f}"
        )
        if t.get("rel"):
            rel = t["rel"]
            lines.append(
                f"- relations: T = {rel['temperature']:.3f} ({rel['status']}), dev NLL/word {rel['nll_per_word_before']:.4f} → {rel['nll_per_word_after']:.4f}"
            )
        dev_metrics = t.get("dev_metrics")
        if dev_metrics:
            lines += [
                "",
                "| on dev | UAS predicted (%) | UAS MBR (%) | arc ECE | labeled-arc ECE | AUROC 1 − head_prob |",
                "|---|---:|---:|---:|---:|---:|",
            ]
            for name, m in dev_metrics.items():
                lines.append(
                    f"| {name} | {_pct(m['uas_map'])} | {_pct(m['uas_mbr'])} | {_f(m['arc_ece'])} | "
                    f"{_f(m['labeled_arc_ece'])} | {_f(m['auroc_one_minus_head_prob'])} |"
                )
    if report.get("calibration"):
        lines += ["", "## Calibration: the tree distribution vs the local per-word softmax", ""]
        lines += calibration_lines(report["calibration"])
    if report.get("risk"):
        lines += ["", "## Sentence risk: which parses have an attachment error", ""]
        lines += risk_lines(report["risk"])
    if report.get("timing"):
        lines += [
            "",
            "## Entropy: T1 (O(n³)) vs the O(n⁴) baseline, by sentence length",
            "",
            *timing_lines(report["timing"]),
            "",
            f"Best of {report['timing']['repeats']} runs, float64, 1 torch thread; unbatched: one sentence at a time; "
            "batched: each bucket's sentences padded into one call.",
        ]
    if plots:
        lines += ["", "## Plots", ""] + [f"![{name}]({name})" for name in plots]
    write_atomic(path, "\n".join(lines) + "\n")


#: Every plot :func:`write_plots` may write: those a run does not write are removed from its
#: folder, so that a second evaluation into the same folder leaves none of the first's.
PLOTS = ("reliability.png", "oracle_uas.png", "entropy_timing.png", "reliability_genres.png")


def remove_stale_plots(out_dir: Path, written: List[str]) -> None:
    """Delete the plots of :data:`PLOTS` in ``out_dir`` that this run did not write."""
    for name in PLOTS:
        if name not in written:
            (out_dir / name).unlink(missing_ok=True)


def write_plots(report: Dict[str, Any], out_dir: Path) -> List[str]:
    """Reliability diagrams, oracle UAS by k and entropy vs errors; returns the file names."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    blocks = {"raw": report["raw"]}
    if report.get("pipeline_map"):
        blocks["the pipeline's map"] = report["pipeline_map"]
    if report.get("calibrated"):
        blocks[f"T = {report['calibrated']['arc_temperature']:.2f} (dev)"] = report["calibrated"]
    written = []
    kinds = [
        ("arc", "head_prob of the predicted head"),
        ("labeled_arc", "labeled arc (dep_prob)"),
        ("relation_given_correct_head", "p(label | correct head)"),
        ("arc_all_candidates", "every candidate arc"),
    ]
    present = [(key, title) for key, title in kinds if key in report["raw"]["calibration"]]
    fig, axes = plt.subplots(1, len(present), figsize=(4.2 * len(present), 4.2), squeeze=False)
    for ax, (key, title) in zip(axes[0], present):
        ax.plot([0, 1], [0, 1], color="grey", linestyle="--", linewidth=1)
        for name, block in blocks.items():
            cal = block["calibration"][key]
            xs = [b["confidence"] for b in cal["bins"]]
            ys = [b["accuracy"] for b in cal["bins"]]
            ax.plot(xs, ys, marker="o", label=f"{name}: ECE {_f(cal['ece'])}")
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("mean confidence (15 equal-mass bins)")
        ax.set_ylabel("accuracy")
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1)
        ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    _save_figure(fig, out_dir / "reliability.png", 110)
    plt.close(fig)
    written.append("reliability.png")

    if "samples" in report["raw"]:
        fig, ax = plt.subplots(figsize=(5, 4))
        for name, block in blocks.items():
            samples = block["samples"]
            ks = samples["ks"]
            for mode, style in (("with_replacement", "-"), ("without_replacement", "--")):
                ax.plot(
                    ks,
                    [100 * samples[mode]["oracle_uas"][str(k)] for k in ks],
                    style,
                    marker="o",
                    label=f"{name}, {mode.replace('_', ' ')}",
                )
            ax.axhline(100 * block["attachment"]["uas_map"], color="grey", linewidth=1)
        ax.set_xscale("log")
        ax.set_xlabel("k samples")
        ax.set_ylabel("oracle UAS (%)")
        ax.set_title("best of k sampled trees (grey: predicted tree)", fontsize=10)
        ax.legend(fontsize=7)
        fig.tight_layout()
        _save_figure(fig, out_dir / "oracle_uas.png", 110)
        plt.close(fig)
        written.append("oracle_uas.png")

    if report.get("calibration"):
        written.append(reliability_by_genre(report["calibration"], out_dir, plt))

    timing = report.get("timing")
    if timing and timing["rows"]:
        fig, ax = plt.subplots(figsize=(5, 4))
        xs = [row["mean_length"] for row in timing["rows"]]
        ax.plot(xs, [row["engine_ms_per_sentence"] for row in timing["rows"]], marker="o", label="T1 engine, O(n³)")
        ax.plot(xs, [row["baseline_ms_per_sentence"] for row in timing["rows"]], marker="s", label="baseline, O(n⁴)")
        ax.plot(
            xs,
            [row["engine_batched_ms_per_sentence"] for row in timing["rows"]],
            "--",
            marker="o",
            color="C0",
            label="T1 engine, batched per bucket",
        )
        ax.plot(
            xs,
            [row["baseline_batched_ms_per_sentence"] for row in timing["rows"]],
            "--",
            marker="s",
            color="C1",
            label="baseline, batched per bucket",
        )
        ax.set_xlabel("mean sentence length of the bucket")
        ax.set_ylabel("ms per sentence (entropy)")
        ax.set_yscale("log")
        ax.legend(fontsize=8)
        fig.tight_layout()
        _save_figure(fig, out_dir / "entropy_timing.png", 110)
        plt.close(fig)
        written.append("entropy_timing.png")
    return written


def reliability_by_genre(section: Dict[str, Any], out_dir: Path, plt: Any) -> str:
    """One reliability diagram (equal-width bins) per genre and overall, a line per variant."""
    test = section["test"]
    named = sorted({g for table in test.values() for g in table["genres"]})
    genres = ["overall"] + (named if len(named) > 1 else [])  # one genre ("all") is the overall panel again
    columns = min(3, len(genres))
    rows = -(-len(genres) // columns)
    fig, axes = plt.subplots(rows, columns, figsize=(4.2 * columns, 4.0 * rows), squeeze=False)
    for ax, genre in zip(axes.reshape(-1), genres):
        ax.plot([0, 1], [0, 1], color="grey", linestyle="--", linewidth=1)
        for name, table in test.items():
            block = table["overall"] if genre == "overall" else table["genres"].get(genre)
            if block is None:
                continue
            xs = [b["confidence"] for b in block["bins"]]
            ys = [b["accuracy"] for b in block["bins"]]
            style = "-" if name.startswith("tree") else ":"
            label = f"{name}: ECE {_f(block['arc_ece'], 3)} [{_f(block['arc_ece_chance_band'], 3)}]"
            ax.plot(xs, ys, style, marker=".", label=label)
        ax.set_title(f"{genre}: ECE [chance band]", fontsize=10)
        ax.set_xlabel("confidence in the predicted head (15 equal-width bins)")
        ax.set_ylabel("accuracy")
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1)
        ax.legend(fontsize=6, loc="upper left")
    for ax in axes.reshape(-1)[len(genres) :]:
        ax.axis("off")
    fig.tight_layout()
    _save_figure(fig, out_dir / "reliability_genres.png", 100)
    plt.close(fig)
    return "reliability_genres.png"
