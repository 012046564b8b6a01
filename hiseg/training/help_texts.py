"""``hiseg train``'s help without torch: the texts LightningCLI's parser prints, stored.

Building that parser imports torch and Lightning and reads their classes (seconds and hundreds of
MB: ``benchmarks/results/training.md``, "Moved from docstrings"), so
a bare help request (``hiseg train --help``, ``python train.py fit --help``, ``-h``) prints the
text the live parser printed for the same request (:mod:`hiseg.training.help_render` renders
and stores it, at :data:`COLUMNS` columns) when nothing it depends on differs: the command's name,
the default config (its path as given to the parser, and its content), Python's and hiseg's
versions and those of every distribution the parser was built from. A command line holding an
option the parser does not know, or a stray word, gets the parser's refusal built from the same
text (:func:`stored_option_error`: its usage, tip and "unrecognized arguments" line). Otherwise,
and for every other command line (a bad value included), the live parser answers.
"""
from __future__ import annotations

import hashlib
import json
import platform
import sys
from pathlib import Path
from typing import Optional, Sequence

__all__ = ["HELP_FILE", "COLUMNS", "SUBCOMMANDS", "help_request", "shown_config", "config_digest", "environment",
           "load_stored", "stored_help", "print_stored_help", "stored_option_error", "print_stored_option_error"]

#: the stored texts (JSON, xz-compressed: a dozen near-identical pages)
HELP_FILE = Path(__file__).with_name("help_texts.json.xz")
#: the width the texts are rendered at (the live parser follows the terminal, ``COLUMNS``)
COLUMNS = 80
#: LightningCLI's subcommands here; ``fit`` when none is given
SUBCOMMANDS = ("fit", "validate", "test")
#: options the stored refusal leaves to the live parser: they print, read configs or change what is known
_LIVE_ONLY = ("-h", "--help", "--print_config", "-c", "--config", "--data", "--trust-config")


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


def _print(text: Optional[str], stream) -> bool:
    if text is not None:
        stream.write(text)
        stream.flush()
    return text is not None


def print_stored_help(argv: Sequence[str], prog: str, default_config=None) -> bool:
    """Print the stored help text for ``prog ARGV`` (:func:`stored_help`); whether there was one."""
    return _print(stored_help(argv, prog, default_config), sys.stdout)


def _option_kind(name: str, known: set) -> str:
    """``known`` (listed), ``unknown`` (neither listed nor below a listed option that takes a class
    or a dict), or ``open`` (below such an option: ``--data.init_args.X``, ``--trainer.logger.X``).
    A listed option whose own sub-options are listed (``--trainer``, ``--model``) is closed."""
    if name in known:
        return "known"
    parts = name.split(".")
    for n in range(len(parts) - 1, 0, -1):
        prefix = ".".join(parts[:n])
        if prefix in known:
            return "unknown" if any(k.startswith(prefix + ".") for k in known) else "open"
    return "unknown"


def _unrecognized(words: Sequence[str], known: set) -> Optional[list]:
    """The words LightningCLI's parser would leave unrecognised (unknown options, with the words
    after them, and stray words), when the command line is plain enough to tell from the option
    names alone; None when it is not (the live parser decides)."""
    out, i = [], 0
    while i < len(words):
        word = words[i]
        if not word.startswith("-"):
            out.append(word)  # a stray word (no known option before it took it as its value)
            i += 1
            continue
        name = word.split("=", 1)[0]
        if name in _LIVE_ONLY or not name.startswith("--"):
            return None
        kind = _option_kind(name, known)
        if kind == "open":
            return None  # below an option that takes a class or a dict: its parser knows what it accepts
        if kind == "known":
            if "=" in word:
                i += 1
            elif i + 1 < len(words) and not words[i + 1].startswith("-"):
                i += 2  # the option and its value
            else:
                return None  # a known option without its value: the live parser says what it needs
            continue
        out.append(word)
        i += 1
    return out


def stored_option_error(argv: Sequence[str], prog: str, default_config=None) -> Optional[str]:
    """The live parser's refusal (usage, tip, "error: unrecognized arguments: ...") of a command
    line holding options it does not know or stray words, from the stored help of the same
    subcommand (:func:`stored_help`: the same command name, config and environment); None when
    there are none, when the command line is not plain enough to tell (it names configs, asks
    for help or a printed config, leaves an option without its value, or names code the config
    check refuses), or when no stored text applies: the live parser then answers."""
    argv = list(argv)
    sub, words = (argv[0], argv[1:]) if argv and argv[0] in SUBCOMMANDS else ("fit", argv)
    # the usual training command (no word, or a config named) reads no stored text
    if not words or any(w.split("=", 1)[0] in _LIVE_ONLY for w in words):
        return None
    text = stored_help([sub, "--help"], prog, default_config)
    if text is None:
        return None
    import re

    usage = text.split("\n\n", 1)[0]
    known = set(re.findall(r"(?<![\w-])(--[A-Za-z][\w-]*(?:\.[\w-]+)*)", usage))
    unknown = _unrecognized(words, known)
    if not unknown:
        return None
    try:
        from .configs import check_config_text

        check_config_text(words)
    except ValueError:  # refused as code: the live parser's first word is that refusal
        return None
    return (f"{usage}\ntip: For details of accepted options run: {prog} {sub} --help\n"
            f"error: unrecognized arguments: {' '.join(unknown)}\n")


def print_stored_option_error(argv: Sequence[str], prog: str, default_config=None) -> bool:
    """Print :func:`stored_option_error` on stderr; whether there was one (the command then exits 2)."""
    return _print(stored_option_error(argv, prog, default_config), sys.stderr)
