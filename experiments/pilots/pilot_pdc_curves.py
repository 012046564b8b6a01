"""Collect the CPU pilot's curves (experiments/pilots/pilot_pdc.sh) into a CSV and a markdown table.

    python experiments/pilots/pilot_pdc_curves.py [--runs runs/pilot_pdc] [--out experiments/pilots/results/pilot_pdc]

Reads ``RUNS/<arch>/csv/version_*/metrics.csv`` (a resumed run writes a new version folder;
rows are merged by step, the latest version winning) for every architecture folder under
``RUNS`` and writes ``OUT/curves.csv`` (one row per validation: arch, step, crops seen, the
validation boundary F of the UCM at the fixed threshold and at the best of its thresholds,
the validation pixel loss, and the mean training loss since the previous row) and
``OUT/curves.md`` (the same, one column pair per architecture; stamped with the revision, date,
machine and command, ``benchmarks/provenance.py``, which the CSV cannot hold). Raises FileNotFoundError
when ``RUNS`` holds no metrics.
"""
from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from provenance import write_stamped  # noqa: E402

FIELDS = ["arch", "step", "crops", "val_boundary_f", "val_boundary_f_ods", "val_pixel", "train_loss"]


def _num(v):
    return float(v) if v not in (None, "") else None


def curves(runs: Path, batch: int) -> list[dict]:
    """The rows of ``curves.csv`` for every ``runs/<arch>`` folder (see the module docstring)."""
    rows = []
    for arch_dir in sorted(p for p in runs.iterdir() if p.is_dir()):
        files = sorted(arch_dir.glob("csv/version_*/metrics.csv"), key=lambda f: int(f.parent.name.split("_")[-1]))
        train, val = {}, {}
        for f in files:
            for r in csv.DictReader(open(f)):
                step = int(r["step"])
                if _num(r.get("train/loss")) is not None:
                    train[step] = float(r["train/loss"])
                if _num(r.get("val/boundary_f_ods")) is not None:
                    val[step] = r
        prev = -1
        for step in sorted(val):
            tl = [v for s, v in train.items() if prev < s <= step]
            r = val[step]
            rows.append(dict(arch=arch_dir.name, step=step + 1, crops=(step + 1) * batch,
                             val_boundary_f=_num(r.get("val/boundary_f")),
                             val_boundary_f_ods=_num(r.get("val/boundary_f_ods")), val_pixel=_num(r.get("val/pixel")),
                             train_loss=sum(tl) / len(tl) if tl else None))
            prev = step
    if not rows:
        raise FileNotFoundError(f"no validation rows in {runs}/*/csv/version_*/metrics.csv")
    return rows


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", default="runs/pilot_pdc")
    ap.add_argument("--out", default="experiments/pilots/results/pilot_pdc")
    ap.add_argument("--batch", type=int, default=8, help="crops per step (for the crops column)")
    a = ap.parse_args(argv)
    rows = curves(Path(a.runs), a.batch)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "curves.csv", "w", newline="") as f:
        w = csv.DictWriter(f, FIELDS)
        w.writeheader()
        w.writerows({k: (f"{v:.4f}" if isinstance(v, float) else v) for k, v in r.items()} for r in rows)
    archs = sorted({r["arch"] for r in rows})
    by = {(r["arch"], r["step"]): r for r in rows}
    lines = ["| step | crops | " + " | ".join(f"{a} F (ODS of 20 val) | {a} train loss" for a in archs) + " |",
             "|---:|---:|" + "---:|---:|" * len(archs)]
    for step in sorted({r["step"] for r in rows}):
        cells = []
        for arch in archs:
            r = by.get((arch, step))
            cells += ["" if r is None or r[k] is None else f"{r[k]:.4f}" for k in ("val_boundary_f_ods", "train_loss")]
        lines.append(f"| {step} | {step * a.batch} | " + " | ".join(cells) + " |")
    lines += ["", "`curves.csv` beside this table: the same rows, one per validation and architecture."]
    print(write_stamped(out / "curves.md", "\n".join(lines)).read_text())


if __name__ == "__main__":
    main()
