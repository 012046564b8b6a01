"""The stamp every results table carries: revision, date, machine and the exact command.

Every script of ``benchmarks/`` and ``experiments/`` that writes a results table calls this
module where it writes (``tests/benchmarks/test_results_stamped.py`` checks it), so a table
says what produced it and timings need not live in docstrings, where they go stale.

* :func:`stamp`: the line itself, one Markdown paragraph::

      Stamp: revision `d875e86+dirty`, 2026-11-29T08:40:12Z (UTC), AMD EPYC, 2 CPUs, 23.5 GiB RAM;
      command: `python benchmarks/bench_rag.py --out x.md`

* :func:`stamped`: a text with its stamp below it; :func:`write_stamped` writes it to a
  file, :func:`append_stamped` adds it to a file as a new section (the earlier sections kept).
* ``python benchmarks/provenance.py FILE... --command "..."``: appends a stamp to tables a
  shell script had another program write (``hiseg evaluate``'s ``results.md``).

The revision is the short hash of ``HEAD``, ``+dirty`` when tracked files differ from it,
``unknown`` outside a git checkout (or without git); the machine is described without its
host name: CPU model, CPU count, memory, and the CUDA device when the script has already
imported torch (this module never imports it). Scripts outside ``benchmarks/`` import it
after ``sys.path.insert(0, str(ROOT / "benchmarks"))``; the hiseg package never does (it must
not depend on git).
"""
from __future__ import annotations

import argparse
import datetime
import os
import platform
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: how a stamp line starts (the test finds stamped tables by it)
STAMP = "Stamp:"
#: how a provenance line recovered from git history starts, for rows measured before stamps
RECOVERED = "Provenance, recovered from git history:"


def revision(root: Path | str = ROOT) -> str:
    """The short hash of ``root``'s ``HEAD``, ``+dirty`` when tracked files have uncommitted
    changes; ``"unknown"`` outside a git checkout or when git cannot be run."""
    def git(*args):
        return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=30,
                              check=True).stdout.strip()

    try:
        rev = git("rev-parse", "--short", "HEAD")
        dirty = git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return f"{rev}+dirty" if dirty else (rev or "unknown")


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.lower().startswith(("model name", "hardware", "cpu model")):
                    return " ".join(line.split(":", 1)[1].split())
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def _memory_gib() -> float | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2 ** 30
    except (AttributeError, ValueError, OSError):
        return None


def _gpu() -> str | None:
    """The CUDA device's name when torch is already imported and sees one (never imports torch)."""
    torch = sys.modules.get("torch")
    try:
        if torch is not None and torch.cuda.is_available():
            return torch.cuda.get_device_name(torch.cuda.current_device())
    except Exception:  # noqa: BLE001 - a stamp must never fail the run it describes
        return None
    return None


def machine() -> str:
    """The machine in words, without its host name: CPU model, CPU count, memory, CUDA device."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    parts = [_cpu_model(), f"{cpus} CPUs"]
    mem = _memory_gib()
    if mem:
        parts.append(f"{mem:.1f} GiB RAM")
    gpu = _gpu()
    if gpu:
        parts.append(f"GPU {gpu}")
    return ", ".join(parts)


def command(argv: list | None = None, root: Path | str = ROOT) -> str:
    """``python`` and the shell-quoted ``argv`` (default ``sys.argv``), the script's path made
    relative to ``root`` where it lies inside it."""
    argv = [str(a) for a in (sys.argv if argv is None else argv)]
    if argv and argv[0] not in ("", "-c", "-m"):
        try:
            argv[0] = Path(argv[0]).resolve().relative_to(Path(root).resolve()).as_posix()
        except ValueError:
            pass
    return shlex.join(["python", *argv]) if argv else "python"


def stamp(argv: list | None = None, root: Path | str = ROOT, command_line: str | None = None) -> str:
    """The stamp line: revision, UTC date, machine and command (``command_line`` when given,
    else :func:`command` of ``argv``)."""
    now = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)
    cmd = command_line if command_line is not None else command(argv, root)
    return (f"{STAMP} revision `{revision(root)}`, {now:%Y-%m-%dT%H:%M:%SZ} (UTC), {machine()}; "
            f"command: `{cmd}`")


def stamped(text: str, **kw) -> str:
    """``text`` with its stamp below it, a paragraph of its own; ends with a newline."""
    return f"{text.rstrip()}\n\n{stamp(**kw)}\n"


def write_stamped(path: Path | str, text: str, **kw) -> Path:
    """Writes ``text`` and its stamp to ``path`` (replacing it; its folder made); returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(stamped(text, **kw), encoding="utf-8")
    return path


def append_stamped(path: Path | str, text: str, **kw) -> Path:
    """Adds ``text`` and its stamp to ``path`` as a new section after the earlier ones (two
    blank lines between), making the file when absent; returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    earlier = path.read_text(encoding="utf-8").rstrip() if path.is_file() else ""
    path.write_text(f"{earlier}\n\n\n{stamped(text, **kw)}" if earlier else stamped(text, **kw), encoding="utf-8")
    return path


def append_rows(path: Path | str, rows: list, header: str, **kw) -> Path:
    """Adds ``rows`` (Markdown table lines) at the end of the last table of ``path`` and their
    stamp as a line of the list below it (``- rows 5-6: Stamp: ...``), so that one table grows
    run by run and each run's rows keep their stamp; a file without a table starts as
    ``header`` (its title and the table's two head lines). Returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    old = path.read_text(encoding="utf-8") if path.is_file() else ""
    lines = (old if "\n|" in f"\n{old}" else f"{old.rstrip()}\n\n{header}" if old.strip() else header)
    lines = lines.rstrip("\n").splitlines()
    end = max(i for i, ln in enumerate(lines) if ln.startswith("|")) + 1
    start = end
    while start > 0 and lines[start - 1].startswith("|"):
        start -= 1
    first = end - start - 1  # the table's data rows so far (its head is two lines), numbered from 1
    span = f"row {first}" if len(rows) == 1 else f"rows {first}-{first + len(rows) - 1}"
    lines[end:end] = [str(r).rstrip("\n") for r in rows]
    if not lines[-1].startswith("- "):
        lines.append("")
    lines.append(f"- {span}: {stamp(**kw)}")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description="Append a stamp to results tables another program wrote.")
    p.add_argument("files", nargs="+", type=Path, help="the tables (Markdown) to stamp")
    p.add_argument("--command", required=True, help="the command that produced them, as run")
    a = p.parse_args(argv)
    for f in a.files:
        write_stamped(f, f.read_text(encoding="utf-8"), command_line=a.command)
    return 0


if __name__ == "__main__":
    sys.exit(main())
