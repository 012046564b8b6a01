"""``hiseg train``'s help without torch: the texts LightningCLI's parser prints, stored.

Building that parser imports torch and Lightning and reads their classes (seconds, ~900 MB), so
a bare help request (``hiseg train --help``, ``python train.py fit --help``, ``-h``) prints the
text the live parser printed for the same request (:mod:`hiseg.training.help_render` renders
and stores it, at :data:`COLUMNS` columns) when nothing it depends on differs: the command's name,
the default config (its path as given to the parser, and its content), Python's and hiseg's
versions and those of every distribution the parser was built from. Otherwise, and for every
other command line (option errors included), the live parser answers.
"""
from __future__ import annotations

import hashlib
import json
import platform
import sys
from pathlib import Path
from typing import Optional, Sequence

__all__ = ["HELP_FILE", "COLUMNS", "help_request", "shown_config", "config_digest", "environment", "load_stored", "stored_help",
           "print_stored_help"]

#: the stored texts (JSON, xz-compressed: a dozen near-identical pages)
HELP_FILE = Path(__file__).with_name("help_texts.json.xz")
#: the width the texts are rendered at (the live parser follows the terminal, ``COLUMNS``)
COLUMNS = 80


def help_request(argv: Sequence[str]) -> Optional[tuple[str, ...]]:
    """``argv`` as a stored text's key when it only asks for help (``--help`` or ``SUB --help``;
    ``-h`` is ``--help``); None for anything else."""
    argv = list(argv)
    if not argv or argv[-1] not in ("-h", "--help") or len(argv) > 2 or any(a.startswith("-") for a in argv[:-1]):
        return None
    return (*argv[:-1], "--help")


def shown_config(path) -> Optional[str]:
    """The default config as the parser is given it: relative to the working folder when it lies
    inside it (so that the help, which names it, reads the same in every checkout); None when
    there is none or the file does not exist."""
    if path is None or not Path(path).is_file():
        return None
    p = Path(path).absolute()
    try:
        return str(p.relative_to(Path.cwd()))
    except ValueError:
        return str(p)


def config_digest(shown: Optional[str]) -> Optional[str]:
    """SHA-256 of the config's content (its values are the help's defaults); None without one."""
    return None if shown is None else hashlib.sha256(Path(shown).read_bytes()).hexdigest()


def environment(distributions: Sequence[str]) -> dict:
    """Python's and hiseg's versions and each distribution's (None: not installed): what the
    parser, its classes and its formatting come from."""
    from importlib import metadata

    from .. import __version__

    versions = {}
    for name in distributions:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return {"python": platform.python_version(), "hiseg": __version__, "distributions": versions}


def load_stored() -> Optional[dict]:
    """The stored texts; None when the file is missing or unreadable (the live parser answers)."""
    try:
        import lzma
    except ImportError:  # a Python built without it
        return None
    try:
        return json.loads(lzma.decompress(HELP_FILE.read_bytes()))
    except (OSError, ValueError, EOFError, lzma.LZMAError):
        return None


def stored_help(argv: Sequence[str], prog: str, default_config=None) -> Optional[str]:
    """The stored help text for ``prog ARGV`` with ``default_config``, or None when ``argv`` is not
    a bare help request or no text was rendered for exactly this case and environment."""
    key = help_request(argv)
    if key is None:
        return None
    data = load_stored()
    if data is None:
        return None
    config = shown_config(default_config)
    digest = config_digest(config)
    for entry in data["texts"]:
        if (entry["prog"], tuple(entry["argv"]), entry["config"], entry["config_sha256"]) == (prog, key, config,
                                                                                             digest):
            break
    else:
        return None
    if environment(list(data["environment"]["distributions"])) != data["environment"]:
        return None
    return entry["text"]


def print_stored_help(argv: Sequence[str], prog: str, default_config=None) -> bool:
    """Print the stored help text for ``prog ARGV`` (:func:`stored_help`); whether there was one."""
    text = stored_help(argv, prog, default_config)
    if text is not None:
        sys.stdout.write(text)
        sys.stdout.flush()
    return text is not None
