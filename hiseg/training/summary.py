"""The closing summary of a fit (``train.py``): the starting model, the best checkpoint and the last
step on the monitored figure, as ``metrics.csv`` holds them, and which checkpoint to use."""
from __future__ import annotations

import re
from pathlib import Path
from typing import Optional

from .module import VAL_THRESHOLDS

__all__ = ["fit_summary"]


def _csv_row(checkpoint) -> str:
    """Where a checkpoint's figures are in ``metrics.csv``: a name's ``step=N`` counts the steps done
    (as the summary's first line), ``metrics.csv``'s step column counts from 0 (Lightning's), so its
    validation row is step N - 1; empty for a name without a step."""
    found = re.search(r"step=(\d+)", Path(str(checkpoint)).name)
    if not found or int(found.group(1)) < 1:
        return ""
    n = int(found.group(1))
    return f" (after {n} steps: metrics.csv's row of step {n - 1}, whose step column counts from 0)"


def _figure_name(key: str, threshold) -> str:
    """What a validation figure (``boundary_f``, ``boundary_f_ods``, ``loss``, ...) is, in words."""
    return {"boundary_f": f"validation boundary F at threshold {threshold:g}",
            "boundary_f_ods": f"validation boundary F at the best of {len(VAL_THRESHOLDS)} thresholds",
            "loss": "validation loss"}.get(key, f"validation {key}")


def _start_note(start) -> Optional[str]:
    """What a fine-tune from the shipped model ``start`` is compared to and replaces, when
    ``start`` is not the default model (``hiseg predict`` without ``--checkpoint``)."""
    from ..models.weights import DEFAULT_PRETRAINED, Weights

    if not start or str(start).lower() not in Weights.names() or str(start).lower() == DEFAULT_PRETRAINED:
        return None
    ods = {n: Weights.from_name(n).value.meta.get("bsds500_val", {}).get("ods") for n in (start, DEFAULT_PRETRAINED)}
    return (f"  compared to: the starting model {start} only. hiseg predict's default model is {DEFAULT_PRETRAINED} "
            f"(BSDS500 val ODS {ods[DEFAULT_PRETRAINED]}, against {ods[start]} for {start}), which this run did not "
            f"start from: its checkpoints replace {start}, not the default; compare them with {DEFAULT_PRETRAINED} "
            "on your own images (hiseg predict, hiseg evaluate) before using them instead of it.")


def _zero_warning(ods: float, threshold: float) -> list:
    """The lines of a run whose validation boundary F ended at 0 at ``threshold`` (``ods``: at the best one)."""
    return [
        f"  WARNING: validation boundary F ended at 0 (threshold {threshold:g}): the hierarchy's "
        "boundaries match none of the annotations" + (f" at that threshold (best of {len(VAL_THRESHOLDS)} "
                                                      f"thresholds: {ods:.4f})" if ods > 0 else "") + ". Try:",
        "    - fine-tuning the shipped model instead of training from scratch: --config configs/folder_finetune.yaml"
        " (or --model.init_from bsds500 with its architecture);",
        "    - a lower learning rate (--model.lr), or more steps (--trainer.max_steps) on more images;",
        "    - checking the labels: one integer label per region, the same size as each image "
        "(datasets/README.md); a label image of one region has no boundary to learn."]


def fit_summary(trainer, model) -> str:
    """The closing summary of a fit (see :meth:`HisegCLI.after_fit`): the validation figures of
    the starting model (measured before the first step, logged as ``val_start/...``), of the best
    checkpoint and of the last step, as ``metrics.csv`` holds them; whether the run improved on
    the starting model, judged on the figure the best checkpoint is chosen on (the checkpoint
    callback's ``monitor``, in its ``mode``; without one, the last step's boundary F at the best
    threshold); the checkpoints, and the next command. When it did not improve, it says so
    plainly and recommends no new checkpoint; a fine-tune of a shipped model other than the
    default says what it is compared to and what it replaces (:func:`_start_note`)."""
    from pytorch_lightning.callbacks import ModelCheckpoint

    threshold = getattr(getattr(model, "hparams", None), "val_threshold", 0.5)
    before = getattr(model, "initial_validation", None) or {}
    after = {k[len("val/"):]: float(v) for k, v in trainer.callback_metrics.items() if k.startswith("val/")}
    best = last = None
    for cb in trainer.callbacks:
        if isinstance(cb, ModelCheckpoint) and cb.monitor and cb.best_model_path:
            best = best or cb
        if getattr(cb, "last_model_path", None):
            last = last or cb.last_model_path
    if best is not None:
        key = best.monitor[len("val/"):] if best.monitor.startswith("val/") else best.monitor
        score = None if best.best_model_score is None else float(best.best_model_score)
        higher = getattr(best, "mode", "max") != "min"
    else:
        key = "boundary_f_ods" if "boundary_f_ods" in after else "boundary_f"
        score, higher = after.get(key), True
    name = _figure_name(key, threshold)

    def fs(d):
        if "boundary_f" not in d:
            return "not measured"
        return (f"{d['boundary_f']:.4f} at threshold {threshold:g}, {d.get('boundary_f_ods', float('nan')):.4f} at the "
                f"best of {len(VAL_THRESHOLDS)} thresholds")
    start = getattr(getattr(model, "hparams", None), "init_from", None)
    where = f"the best checkpoint ({best.monitor}, {'highest' if higher else 'lowest'})" if best else "the last step"
    lines = ["", f"[hiseg] training finished: {trainer.current_epoch} epoch(s), {trainer.global_step} step(s); "
                 f"compared on the {name}, at {where}",
             f"  validation boundary F of the starting model{f' ({start})' if start else ''}: {fs(before)}"]
    if best is not None:
        lines.append(f"  {name} of the best checkpoint: " + ("not measured" if score is None else f"{score:.4f}"))
    lines.append(f"  validation boundary F at the last step:         {fs(after)}")
    degenerate = best is not None and higher and (score is None or not score > 0)
    worse = key in before and score is not None and not (score > before[key] if higher else score < before[key])
    if best is not None:
        note = "  (F 0: not worth using)" if degenerate else ""
        shown = "not measured" if score is None else f"{score:.4f}"
        lines.append(f"  best checkpoint ({best.monitor} = {shown}): {best.best_model_path}"
                     f"{_csv_row(best.best_model_path)}{note}")
    if best is not None and key == "boundary_f" and "boundary_f_ods" in after:
        lines.append("  note: chosen on F at one threshold; hiseg evaluate's ODS is F at the best threshold "
                     "(val/boundary_f_ods, logged too): monitor it to choose the checkpoint on it")
    if last:
        lines.append(f"  last checkpoint (resume with --ckpt_path): {last}")
    zero = "boundary_f" in after and not after["boundary_f"] > 0
    if zero:
        lines += _zero_warning(after.get("boundary_f_ods", 0.0), threshold)
    elif worse:
        keep = f"hiseg predict IMAGE --checkpoint {start}" if start else "the starting model"
        lines += [f"  NOT IMPROVED: this run did not improve on the starting model ({name} "
                  f"{before[key]:.4f} before, {score:.4f} at {'best' if best else 'the last step'}): keep using it "
                  f"({keep}); for a better run try a lower learning rate (--model.lr), more steps "
                  "(--trainer.max_steps) or more images."]
    elif key in before and score is not None:
        lines.append(f"  IMPROVED on the starting model: {name} {before[key]:.4f} before, {score:.4f} at "
                     f"{'the best checkpoint' if best else 'the last step'}")
    note = _start_note(start)
    if note:
        lines.append(note)
    ck = None if degenerate or worse else (best.best_model_path if best else last)
    if ck and not zero:
        lines.append(f"  next: hiseg predict IMAGE --checkpoint {ck} -o predictions/")
    return "\n".join(lines)
