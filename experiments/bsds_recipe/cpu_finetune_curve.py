"""Collect the background CPU fine-tuning's curve (experiments/bsds_recipe/cpu_finetune.sh) from its
Lightning CSV logs into a small CSV kept in the repository.

    python experiments/bsds_recipe/cpu_finetune_curve.py [--runs runs/cpu_finetune] [--out experiments/bsds_recipe/results/cpu_finetune_curve.csv]

One row per validation (20 val images, every 100 steps): step, boundary F of the UCM at
threshold 0.5 and at the best of 9 thresholds, validation losses, and the mean training
loss over the steps since the previous row. Runs resumed in later sessions (new
``version_N`` folders) are merged by step. The CSV's stamp (revision, date, machine, command:
``benchmarks/provenance.py``) is the Markdown file of the same name beside it.
"""
import argparse
import csv
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from provenance import write_stamped  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", default="runs/cpu_finetune")
    ap.add_argument("--out", default="experiments/bsds_recipe/results/cpu_finetune_curve.csv")
    ap.add_argument("--step0-log", default="runs/cpu_finetune_step0.log",
                    help="output of `train.py validate` on the initial weights (same configs), the step-0 row")
    a = ap.parse_args()
    train, val = {}, {}
    if Path(a.step0_log).is_file():  # the table Lightning prints: "val/boundary_f   0.5281..."
        import re

        found = dict(re.findall(r"(val/\w+)\s+([0-9.eE+-]+)", Path(a.step0_log).read_text()))
        if found:
            val[0] = found
    for f in sorted(Path(a.runs).glob("csv/version_*/metrics.csv")):
        for r in csv.DictReader(open(f)):
            step = int(r["step"])
            if r.get("train/loss"):
                train[step] = float(r["train/loss"])
            if r.get("val/boundary_f_ods"):
                val[step] = r
    keys = ["val/boundary_f", "val/boundary_f_ods", "val/loss", "val/closest", "val/triplet", "val/pixel"]
    rows, prev = [], -1
    for step in sorted(val):
        tl = [v for s, v in train.items() if prev < s <= step]
        rows.append([step] + [f"{float(val[step][k]):.4f}" if val[step].get(k) else "" for k in keys]
                    + [f"{sum(tl) / len(tl):.4f}" if tl else ""])
        prev = step
    with open(a.out, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["step"] + [k.replace("/", "_") for k in keys] + ["train_loss_mean"])
        w.writerows(rows)
    note = write_stamped(Path(a.out).with_suffix(".md"), f"`{Path(a.out).name}`: {len(rows)} validation rows of "
                         f"the CPU fine-tuning (`{a.runs}`), collected by `cpu_finetune_curve.py`.")
    print(f"{len(rows)} validation rows -> {a.out} (its stamp: {note})")
    for r in rows:
        print(r)


if __name__ == "__main__":
    main()
