"""Every results table says what produced it (benchmarks/provenance.py): the stamp gives a
revision, a date, a machine and a command, and "unknown" outside a git checkout; every script of
benchmarks/ and experiments/ that writes a file calls the stamp (or a helper that does), unless it
writes no results table; every results table carries a stamp or a line recovered from git history."""
from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
import provenance  # noqa: E402

#: the provenance functions that stamp what they write or return
STAMPING = {"stamp", "stamped", "write_stamped", "append_stamped", "append_rows"}
#: calls that write a file: pathlib's writers, a helper of hiseg's that writes result files
WRITERS = {"write_text", "write_bytes", "atomic_write_files", "to_csv"}
#: scripts that write files but no results table, and what they write instead
EXEMPT = {
    "experiments/gpu/gpu_choices.py": "joins training curves (metrics.csv, the state a resumed run reads back)",
    "experiments/gpu/prepare_gpu.py": "packs the device run's carried folder (.gpu/), no table",
    "benchmarks/provenance.py": "the stamp itself",
}


def scripts() -> list[Path]:
    return sorted(p for d in ("benchmarks", "experiments") for p in (ROOT / d).rglob("*.py"))


def _name(func: ast.expr) -> str:
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""


def _opens_for_writing(call: ast.Call) -> bool:
    """``open(f, "w")``, ``path.open("a")``, ``lzma.open(f, mode="wb")``: a mode that writes."""
    if _name(call.func) not in ("open", "fdopen"):
        return False
    args = call.args[1:] if isinstance(call.func, ast.Name) or _name(call.func) == "fdopen" else call.args
    if isinstance(call.func, ast.Attribute) and isinstance(call.func.value, ast.Name) and \
            call.func.value.id in ("lzma", "gzip", "bz2", "tarfile", "zipfile", "io", "os", "codecs"):
        args = call.args[1:]
    modes = [a for a in args[:1] if isinstance(a, ast.Constant)]
    modes += [k.value for k in call.keywords if k.arg == "mode" and isinstance(k.value, ast.Constant)]
    return any(isinstance(m.value, str) and set(m.value) & set("wax+") for m in modes)


def writes(tree: ast.AST) -> list[int]:
    """The lines of ``tree`` that write a file."""
    return [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Call)
            and (_name(n.func) in WRITERS or _opens_for_writing(n))]


def stampers(trees: dict) -> dict:
    """``{module: its functions that stamp}`` for every script (a module by its file's stem):
    ``provenance``'s own, and those that call one (``measure.write_table``, ``tables.emit``), so
    that a script calling them stamps what it writes."""
    out = {}
    for rel, tree in trees.items():
        defs = {f.name: f for f in ast.walk(tree) if isinstance(f, ast.FunctionDef)}
        names: set = set()
        while True:
            more = {n for n, f in defs.items() if n not in names and any(
                isinstance(c, ast.Call) and _name(c.func) in STAMPING | names for c in ast.walk(f))}
            if not more:
                break
            names |= more
        out[Path(rel).stem] = names
    out["provenance"] = set(STAMPING)
    return out


def calls_a_stamp(tree: ast.AST, stamps: dict) -> bool:
    """Whether ``tree`` calls a stamping function: imported by name (``from provenance import
    stamp``) or called on its module (``provenance.stamp``, ``measure.write_table``)."""
    names, modules = set(), {}
    for n in ast.walk(tree):
        if isinstance(n, ast.ImportFrom) and n.module in stamps:
            names |= {a.asname or a.name for a in n.names if a.name in stamps[n.module]}
        elif isinstance(n, ast.Import):
            modules.update({a.asname or a.name: stamps[a.name] for a in n.names if a.name in stamps})
    for c in ast.walk(tree):
        if not isinstance(c, ast.Call):
            continue
        f = c.func
        if isinstance(f, ast.Name) and f.id in names:
            return True
        if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.attr in modules.get(f.value.id, ()):
            return True
    return False


def unstamped(trees: dict, stamps: dict | None = None) -> dict:
    """``{script: lines that write}`` of the scripts that write a file and call no stamp."""
    stamps = stampers(trees) if stamps is None else stamps
    return {rel: lines for rel, tree in trees.items()
            if (lines := writes(tree)) and rel not in EXEMPT and not calls_a_stamp(tree, stamps)}


def results_tables() -> list[Path]:
    """The results tables: Markdown under any ``results/`` folder of benchmarks/ and experiments/,
    and the tables the clustering experiments write next to themselves."""
    found = {p for d in ("benchmarks", "experiments") for p in (ROOT / d).rglob("*.md")
             if "results" in p.relative_to(ROOT).parts[:-1] or p.name.startswith("results")}
    found |= {p for p in (ROOT / "experiments" / "clustering").glob("*.md") if p.name != "README.md"}
    return sorted(found)


# (a) the stamp ------------------------------------------------------------------------------------------------------

def test_the_stamp_names_revision_date_machine_and_command():
    line = provenance.stamp(argv=[str(ROOT / "benchmarks" / "bench_rag.py"), "--out", "a b.md"])
    m = re.fullmatch(r"Stamp: revision `([^`]+)`, (\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ) \(UTC\), (.+); command: `(.+)`",
                     line)
    assert m, line
    rev, _, machine, command = m.groups()
    assert rev == "unknown" or re.fullmatch(r"[0-9a-f]{7,40}(\+dirty)?", rev), rev
    assert re.search(r"\d+ CPUs", machine) and "GiB RAM" in machine
    assert command == "python benchmarks/bench_rag.py --out 'a b.md'"  # relative to the root, shell-quoted


def test_dirty_only_with_uncommitted_changes_to_tracked_files(tmp_path):
    git = ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]
    try:
        subprocess.run([*git, "init", "-q"], check=True)
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("git is not installed (the test makes a repository)")
    (tmp_path / "a.txt").write_text("1\n")
    subprocess.run([*git, "add", "a.txt"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "a"], check=True)
    head = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    (tmp_path / "untracked.txt").write_text("not counted\n")
    assert provenance.revision(tmp_path) == head
    (tmp_path / "a.txt").write_text("2\n")
    assert provenance.revision(tmp_path) == f"{head}+dirty"


def test_unknown_revision_outside_git(tmp_path, monkeypatch):
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))  # no repository above tmp_path counts
    assert provenance.revision(tmp_path) == "unknown"
    monkeypatch.setenv("PATH", str(tmp_path))  # no git at all
    assert provenance.revision(ROOT) == "unknown"
    assert "revision `unknown`" in provenance.stamp(root=tmp_path)


def test_the_machine_names_no_host_and_imports_no_torch(monkeypatch):
    import platform
    import socket

    monkeypatch.delitem(sys.modules, "torch", raising=False)
    text = provenance.machine()
    assert "torch" not in sys.modules
    parts = text.split(", ")
    assert socket.gethostname() not in parts and platform.node() not in parts


def test_append_stamped_and_append_rows_keep_earlier_text(tmp_path):
    table = tmp_path / "t.md"
    provenance.append_stamped(table, "# title\n\n| a |\n|---|\n| 1 |")
    provenance.append_stamped(table, "| a |\n|---|\n| 2 |")
    text = table.read_text()
    assert text.startswith("# title") and text.count("Stamp: revision") == 2 and "| 1 |" in text and "| 2 |" in text
    rows = tmp_path / "rows.md"
    provenance.append_rows(rows, ["| x | 1 |"], "# rows\n\n| k | v |\n|---|---|\n")
    provenance.append_rows(rows, ["| y | 2 |", "| z | 3 |"], "unused")
    lines = rows.read_text().splitlines()
    assert lines[2:7] == ["| k | v |", "|---|---|", "| x | 1 |", "| y | 2 |", "| z | 3 |"]  # one table
    assert lines[8].startswith("- row 1: Stamp: ") and lines[9].startswith("- rows 2-3: Stamp: ")


def test_the_command_line_tool_stamps_another_programs_table(tmp_path):
    table = tmp_path / "results.md"
    table.write_text("| a |\n|---|\n| 1 |\n")
    assert provenance.main([str(table), "--command", "sh own_data.sh x"]) == 0
    assert table.read_text().rstrip().endswith("command: `sh own_data.sh x`")


# (b) every script that writes a results table stamps it -------------------------------------------------------------

def _trees() -> dict:
    return {str(p.relative_to(ROOT)): ast.parse(p.read_text(encoding="utf-8")) for p in scripts()}


def test_every_script_that_writes_calls_the_stamp():
    bad = unstamped(_trees())
    assert not bad, f"scripts that write files without a stamp (benchmarks/provenance.py), lines: {bad}"


def test_the_check_finds_a_script_without_the_call():
    stamps = stampers(_trees())
    assert "write_table" in stamps["measure"] and "emit" in stamps["tables"]  # the shared writers that stamp
    cases = {
        "plain.py": "from pathlib import Path\nPath('results/x.md').write_text('| a |')\n",
        "opened.py": "import sys\nwith open('results/x.md', 'a', encoding='utf-8') as f:\n    f.write('| a |')\n",
        "keyword.py": "import csv\nwith open(file='t.csv', mode='w') as f:\n    csv.writer(f)\n",
    }
    for name, src in cases.items():
        assert unstamped({name: ast.parse(src)}, stamps) == {name: [2]}, name
    stamped = "from provenance import write_stamped\nwrite_stamped('results/x.md', '| a |')\n"
    assert unstamped({"ok.py": ast.parse(stamped)}, stamps) == {}
    via = "import measure\nmeasure.write_table(['| a |'], __file__)\nopen('x', 'w')\n"
    assert unstamped({"via.py": ast.parse(via)}, stamps) == {}
    reads = "print(open('results/x.md').read())\n"
    assert unstamped({"reads.py": ast.parse(reads)}, stamps) == {}
    own_name = "def emit(lines):\n    open('t.md', 'w').write(lines)\nemit('| a |')\n"  # not tables.emit
    assert unstamped({"own.py": ast.parse(own_name)}, stamps) == {"own.py": [2]}


# (c) every results table carries a stamp or a line recovered from history ------------------------------------------

def test_every_results_table_says_where_it_came_from():
    tables = results_tables()
    assert len(tables) > 50
    bad = [str(p.relative_to(ROOT)) for p in tables
           if provenance.STAMP not in (text := p.read_text(encoding="utf-8")) and provenance.RECOVERED not in text]
    assert not bad, f"results tables without a stamp or recovered provenance line: {bad}"
