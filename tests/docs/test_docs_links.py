"""The documentation's internal references resolve (issue 42): every relative Markdown link
``[text](path#anchor)`` of a tracked ``.md`` file names a file or folder that exists and, with
``#anchor``, a heading of that file (GitHub's anchors); every reference to a README section in
words (``README, "Your own images"``, in the docs, configs and code) names a heading of the README."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)|!\[[^\]]*\]\(([^)\s]+)\)")
SECTION_REF = re.compile(r"""README[,:]? ['"]([A-Z][^'"\n]{2,80})['"]""")


def tracked(*patterns) -> list[Path]:
    try:
        out = subprocess.run(["git", "ls-files", *patterns], cwd=ROOT, capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    return [ROOT / p for p in out.stdout.splitlines() if (ROOT / p).is_file()]


def _strip_code(text: str) -> str:
    """``text`` without its fenced code blocks and inline code (links there are not links)."""
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    return re.sub(r"`[^`\n]*`", "", text)


def anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces as hyphens."""
    h = re.sub(r"[`*_]|\[([^\]]*)\]\([^)]*\)", lambda m: m.group(1) or "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", h).replace(" ", "-")


def headings(path: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", path.read_text(encoding="utf-8"), flags=re.S)
    return [m.group(1).strip() for m in re.finditer(r"^#{1,6} +(.+?) *#*$", text, flags=re.M)]


def anchors(path: Path) -> set[str]:
    seen, out = {}, set()
    for h in headings(path):
        a = anchor(h)
        out.add(a if a not in seen else f"{a}-{seen[a]}")
        seen[a] = seen.get(a, 0) + 1
    return out


def test_anchor_follows_github():
    assert anchor("Your own images, in detail") == "your-own-images-in-detail"
    assert anchor("Installing `torch` (CPU)") == "installing-torch-cpu"


def test_relative_links_and_anchors_resolve():
    bad = []
    for md in tracked("*.md"):
        for m in LINK.finditer(_strip_code(md.read_text(encoding="utf-8"))):
            target = m.group(1) or m.group(2)
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
                continue
            path, _, frag = target.partition("#")
            dest = (md.parent / path).resolve() if path else md
            rel = md.relative_to(ROOT)
            if not dest.exists():
                bad.append(f"{rel}: {target} (no such file)")
            elif frag and dest.suffix == ".md" and frag not in anchors(dest):
                bad.append(f"{rel}: {target} (no heading #{frag} in {dest.relative_to(ROOT)})")
    assert not bad, "\n".join(bad)


def test_readme_sections_named_in_words_exist():
    sections = set(headings(ROOT / "README.md"))
    bad = []
    for f in tracked("*.md", "*.py", "*.yaml", "*.yml", "*.sh"):
        if f.name == "test_docs_links.py":
            continue
        for m in SECTION_REF.finditer(f.read_text(encoding="utf-8", errors="replace")):
            if m.group(1) not in sections:
                bad.append(f"{f.relative_to(ROOT)}: README section {m.group(1)!r} (sections: {sorted(sections)})")
    assert not bad, "\n".join(bad)


def test_markdown_files_named_in_code_spans_exist():
    """Issue 53, item 11: a ``.md`` file a document names as a path in a code span
    (``experiments/.../README.md``) exists, from the repository's root or the document's folder;
    a placeholder (``NAME/results.md``) is no path."""
    bad = []
    for md in tracked("*.md"):
        text = re.sub(r"```.*?```", "", md.read_text(encoding="utf-8"), flags=re.S)
        for m in re.finditer(r"`([\w./-]+/[\w.-]+\.md)(?:#[\w-]+)?`", text):
            path = m.group(1)
            if any(part.isupper() for part in path.split("/")):
                continue
            if not ((ROOT / path).exists() or (md.parent / path).exists()):
                bad.append(f"{md.relative_to(ROOT)}: `{path}` (no such file)")
    assert not bad, "\n".join(bad)
