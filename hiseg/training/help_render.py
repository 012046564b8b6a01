"""Render ``hiseg train``'s help from the live LightningCLI parser and store it
(:data:`hiseg.training.help_texts.HELP_FILE`), so that a help request answers without torch.

``python -m hiseg.training.help_render`` rewrites the file (from a checkout: one variant reads
``configs/synthetic.yaml``) after a change to the training options, their defaults or docstrings,
Lightning or torch; ``--check`` says whether the stored texts are what the live parser prints
now (``tests/cli/test_cli_help.py`` runs it, so that they cannot go stale).
"""
from __future__ import annotations

import argparse
import contextlib
import difflib
import io
import json
import os
import sys
from pathlib import Path
from typing import Optional, Sequence

from .cli import SUBCOMMANDS, main
from .help_texts import COLUMNS, HELP_FILE, config_digest, environment, load_stored

__all__ = ["VARIANTS", "REQUESTS", "live_help", "live_refusal", "render_all", "main_render"]

ROOT = Path(__file__).resolve().parents[2]
#: (command name, default config) of the commands whose help is stored: ``hiseg train`` outside a
#: checkout and at its root, ``python train.py`` at the root (elsewhere it names the config by its
#: absolute path, and the live parser answers)
VARIANTS = (("hiseg train", None), ("hiseg train", "configs/synthetic.yaml"), ("train.py", "configs/synthetic.yaml"))
#: the help requests stored for each (``-h`` is the same request)
REQUESTS = (("--help",), *((sub, "--help") for sub in SUBCOMMANDS))

# exit statuses of --check
STALE, OTHER_ENVIRONMENT = 1, 3


def _exit_of(argv: Sequence[str], prog: str, default_config: Optional[str], stream: str) -> tuple:
    """(exit status, what it wrote on ``stream``, "stdout" or "stderr") of the live parser's
    ``prog ARGV`` with ``default_config``, at :data:`COLUMNS` columns (the same call as the
    command's: :func:`hiseg.training.cli.main`, reading ``sys.argv``); RuntimeError if it ran
    instead of exiting."""
    saved_argv, saved_columns = sys.argv, os.environ.get("COLUMNS")
    sys.argv, os.environ["COLUMNS"] = [prog, *argv], str(COLUMNS)
    text = io.StringIO()
    redirect = contextlib.redirect_stdout if stream == "stdout" else contextlib.redirect_stderr
    try:
        with redirect(text):
            main(list(argv), default_config=default_config)
    except SystemExit as e:
        return e.code, text.getvalue()
    finally:
        sys.argv = saved_argv
        if saved_columns is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = saved_columns
    raise RuntimeError(f"{prog} {' '.join(argv)} exited with no text: it ran")


def live_help(argv: Sequence[str], prog: str, default_config: Optional[str]) -> str:
    """What the live parser prints for the help request ``prog ARGV`` with ``default_config``."""
    status, text = _exit_of(argv, prog, default_config, "stdout")
    if status not in (0, None):
        raise RuntimeError(f"{prog} {' '.join(argv)} exited with status {status}, not a help text")
    return text


def live_refusal(argv: Sequence[str], prog: str, default_config: Optional[str]) -> tuple:
    """(exit status, stderr) of the live parser's refusal of ``prog ARGV``: what
    :func:`hiseg.training.help_texts.stored_option_error` must print."""
    return _exit_of(argv, prog, default_config, "stderr")


def _loaded_distributions() -> list[str]:
    """The installed distributions of every module loaded now (hiseg's own version is kept apart)."""
    from importlib import metadata

    owners = metadata.packages_distributions()
    return sorted({d for m in list(sys.modules) if "." not in m for d in owners.get(m, ()) if d != "hiseg"})


def render_all() -> dict:
    """Every stored variant's text, rendered now from ``ROOT`` (the checkout), with the
    environment it was rendered in."""
    if not (ROOT / "configs" / "synthetic.yaml").is_file():
        raise SystemExit(f"help_render: error: no configs/synthetic.yaml under {ROOT}: render from a checkout")
    saved = Path.cwd()
    os.chdir(ROOT)
    try:
        texts = [{"prog": prog, "argv": list(argv), "config": config, "config_sha256": config_digest(config),
                  "text": live_help(argv, prog, config)} for prog, config in VARIANTS for argv in REQUESTS]
    finally:
        os.chdir(saved)
    return {"columns": COLUMNS, "environment": environment(_loaded_distributions()), "texts": texts}


def _differences(stored: dict, now: dict) -> list[str]:
    """One line (and the start of a diff) per text that is not what the parser prints now."""
    def key(entry):
        return entry["prog"], tuple(entry["argv"]), entry["config"]

    old, new = ({key(e): e for e in d.get("texts", [])} for d in (stored, now))
    out = [f"{k[0]} {' '.join(k[1])} (config {k[2]}): stored, no longer rendered" for k in old if k not in new]
    for k, entry in new.items():
        if old.get(k) == entry:
            continue
        out.append(f"{k[0]} {' '.join(k[1])} (config {k[2]}): " + ("not stored" if k not in old else "differs"))
        if k in old:
            out += list(difflib.unified_diff(old[k]["text"].splitlines(), entry["text"].splitlines(),
                                             "stored", "live", n=1, lineterm=""))[:20]
    return out


def main_render(argv: Optional[Sequence[str]] = None) -> int:
    """``python -m hiseg.training.help_render [--check]``: write the stored texts, or check them."""
    parser = argparse.ArgumentParser(prog="python -m hiseg.training.help_render", description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true",
                        help=f"compare the stored texts with the live parser's, write nothing (exit status "
                             f"{STALE}: stale, {OTHER_ENVIRONMENT}: rendered in another environment)")
    args = parser.parse_args(argv)
    now = render_all()
    if args.check:
        stored = load_stored() or {}
        if stored.get("environment") != now["environment"]:
            print(f"{HELP_FILE.name} was rendered in another environment: {stored.get('environment')}; "
                  f"here: {now['environment']} (the live parser answers help requests here)")
            return OTHER_ENVIRONMENT
        diff = _differences(stored, now)
        print("\n".join(diff) if diff else f"{HELP_FILE.name}: the live parser's help, {len(now['texts'])} texts")
        return STALE if diff else 0
    import lzma

    tmp = HELP_FILE.with_name(HELP_FILE.name + ".tmp")
    tmp.write_bytes(lzma.compress(json.dumps(now, indent=1, sort_keys=True).encode(), preset=9 | lzma.PRESET_EXTREME))
    os.replace(tmp, HELP_FILE)  # whole or not at all
    print(f"wrote {len(now['texts'])} help texts to {HELP_FILE}")
    return 0


if __name__ == "__main__":
    sys.exit(main_render())
