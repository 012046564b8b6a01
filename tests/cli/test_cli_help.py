"""One vocabulary across the ``hiseg`` subcommands (issue 31): every subcommand's ``--help`` is
parsed as a user reads it, and an option that appears in several has the same flags, metavar
and default text in each; every default is written ``(default: VALUE)``."""
import re

import pytest

from hiseg.cli import main

SUBCOMMANDS = ("predict", "view", "evaluate")
#: an option line of argparse's help at an unbounded width: flags (each with its metavar), then the help
OPTION = re.compile(r"^  ((?:-{1,2}[\w-]+(?: [A-Z_]+(?: \[[A-Z_]+ \.\.\.\])?| \{[^}]*\})?(?:, )?)+)(?:\s{2,}(.*))?$")


def help_options(capsys, monkeypatch, sub: str) -> dict:
    """``{long flag: (flags with metavars, default text or None)}`` of ``hiseg SUB --help``."""
    monkeypatch.setenv("COLUMNS", "10000")  # one line per option
    with pytest.raises(SystemExit) as e:
        main([sub, "--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    options = {}
    lines = out.splitlines()
    for i, line in enumerate(lines):
        m = OPTION.match(line)
        if not m:
            continue
        flags, text = m.group(1), m.group(2)
        if text is None:  # long flags: the help starts on the next line
            text = lines[i + 1].strip()
        long = [f.split()[0] for f in flags.split(", ") if f.startswith("--")][-1]
        defaults = re.findall(r"\(default: ([^()]*(?:\([^()]*\))?[^()]*)\)", text)
        assert len(defaults) <= 1, f"hiseg {sub} {long}: several defaults in {text!r}"
        assert "default " not in text.replace("(default: ", ""), f"hiseg {sub} {long}: a default not written " \
                                                                   f"'(default: VALUE)': {text!r}"
        options[long] = (flags, defaults[0] if defaults else None)
    assert "--help" in options, out
    return options


def test_shared_options_have_one_name_metavar_and_default(capsys, monkeypatch):
    seen = {sub: help_options(capsys, monkeypatch, sub) for sub in SUBCOMMANDS}
    shared = {o for sub in SUBCOMMANDS for o in seen[sub]
              if sum(o in seen[s] for s in SUBCOMMANDS) > 1} - {"--help"}
    assert {"--out", "--workers", "--quiet", "--overwrite", "--checkpoint", "--classical", "--device",
            "--max-pixels"} <= shared
    for option in sorted(shared):
        forms = {sub: seen[sub][option] for sub in SUBCOMMANDS if option in seen[sub]}
        flags = {f for f, _ in forms.values()}
        assert len(flags) == 1, f"{option} is written differently: {forms}"
        defaults = {d for _, d in forms.values() if d is not None}  # a required option shows none
        assert len(defaults) <= 1, f"{option} has different defaults: {forms}"
    assert seen["predict"]["--out"][0] == "-o DIR, --out DIR" == seen["evaluate"]["--out"][0]
    assert seen["predict"]["--workers"] == seen["evaluate"]["--workers"] == ("--workers N", "auto")
    assert seen["predict"]["--checkpoint"][1] == "bsds500_ensemble" == seen["view"]["--checkpoint"][1]
    ensemble = help_options(capsys, monkeypatch, "ensemble")  # one file out; the pipeline options are predict's
    assert ensemble["--out"][0] == "-o DIR, --out DIR"  # a folder in every command (issue 42)
    for option in ("--scales", "--no-flip", "--linkage", "--overwrite"):
        assert ensemble[option][1] == seen["predict"][option][1], option


def test_inputs_are_positional_everywhere(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "10000")
    for sub, usage in (("predict", "INPUT [INPUT ...]"), ("view", "INPUT [INPUT ...]"), ("evaluate", " DIR")):
        with pytest.raises(SystemExit):
            main([sub, "--help"])
        first = capsys.readouterr().out.splitlines()[0]
        assert first.endswith(usage), first
        assert "--pred " not in first and "--no-progress" not in first and "--threshold " not in first


def test_version(capsys):
    from hiseg import __version__

    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0 and capsys.readouterr().out.strip() == f"hiseg {__version__}"


def test_hiseg_alone_prints_the_commands(capsys):
    """``hiseg`` with no argument lists the commands with their one-line help (not only argparse's
    "arguments are required"), and runs nothing (status 2)."""
    assert main([]) == 2
    out = capsys.readouterr().out
    assert out.startswith("usage: hiseg") and all(f"    {c} " in out for c in ("predict", "view", "evaluate", "export"))


@pytest.mark.slow
def test_train_is_train_pys_cli(capsys):
    """``hiseg train --help`` is LightningCLI's help of ``python train.py``."""
    with pytest.raises(SystemExit) as e:
        main(["train", "--help"])
    out = capsys.readouterr().out
    assert e.value.code == 0 and "fit" in out and "validate" in out and "test" in out


@pytest.mark.slow
def test_predict_and_view_use_the_shipped_default_model_and_name_it(tmp_path, capsys):
    """Without --checkpoint: the shipped default model (as ``Segmenter()`` and
    ``Segmenter.from_pretrained()``), named with the device on the first line; --classical and
    --checkpoint none: the no-network baseline."""
    import cv2
    import numpy as np

    from hiseg.segmentation.segmenter import Segmenter
    from hiseg.models import Weights

    img = tmp_path / "x.png"
    cv2.imwrite(str(img), np.kron(np.indices((3, 4)).sum(0) % 2, np.ones((16, 16)))[..., None].repeat(3, -1)
                .astype(np.uint8) * 200)
    default = Weights.default().name.lower()
    assert default == "bsds500_ensemble" == Segmenter().name == Segmenter.from_pretrained().name
    for sub in ("predict", "view"):
        assert main([sub, str(img), "-o", str(tmp_path / sub), "--device", "cpu"]) == 0
        first = capsys.readouterr().out.splitlines()[0]
        assert first.startswith(f"hiseg {sub}: model {default} (the shipped default") and first.endswith("on cpu")
    for i, opts in enumerate((["--classical"], ["--checkpoint", "none"])):
        assert main(["predict", str(img), "-o", str(tmp_path / f"c{i}"), "--device", "cpu", *opts]) == 0
        assert capsys.readouterr().out.splitlines()[0] == "hiseg predict: the classical path (no network) on cpu"
    assert main(["predict", str(img), "-o", str(tmp_path / "q"), "--quiet"]) == 0
    assert capsys.readouterr().out.splitlines() == [f"wrote 1 image(s) to {tmp_path / 'q'}"]
    assert main(["predict", str(img), "-o", str(tmp_path / "n"), "--classical", "-c", "bsds500"]) == 2
    assert "not both" in capsys.readouterr().err and not (tmp_path / "n").exists()


#: argv -> the modules it must not import (torch, Lightning and scipy never; nothing numeric for the
#: top-level help and --version): help and option errors answer at once (issue 42)
_LIGHT = {("--help",): ("numpy",), ("--version",): ("numpy",), (): ("numpy",), ("bogus",): ("numpy",),
          ("predict", "--help"): (), ("view", "--help"): (), ("evaluate", "--help"): (), ("ensemble", "--help"): (),
          ("predict", "x.png", "-o", "o", "--regions", "0"): (), ("evaluate", "pred"): (),
          ("view", "x.png", "-o", "o", "--bogus"): (), ("ensemble", "a", "b"): ()}


@pytest.mark.parametrize("argv", list(_LIGHT), ids=lambda a: " ".join(a) or "(none)")
def test_help_version_and_option_errors_import_no_torch(argv):
    """``hiseg --help``, ``--version``, each command's help and its option errors import no torch
    and no Lightning (checked in ``sys.modules`` of a fresh interpreter: commands import them
    when they run)."""
    import json
    import subprocess
    import sys

    heavy = ("torch", "pytorch_lightning", "lightning", "higra", "cv2", "scipy") + _LIGHT[argv]
    code = ("import json, sys\nfrom hiseg.cli import main\ntry:\n    main(%r)\nexcept SystemExit:\n    pass\n"
            "print(json.dumps(sorted(m for m in %r if m in sys.modules)), file=sys.stderr)" % (list(argv), heavy))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert json.loads(r.stderr.strip().splitlines()[-1]) == [], (argv, r.stderr[-2000:])


def test_the_shipped_names_without_torch_are_the_registrys():
    """The help's torch-free list of shipped models (:mod:`hiseg._shipped`) is :class:`Weights`'."""
    from hiseg._shipped import DEFAULT_PRETRAINED, SHIPPED_NAMES
    from hiseg.models.weights import Weights

    assert list(SHIPPED_NAMES) == Weights.names() and Weights.default().name.lower() == DEFAULT_PRETRAINED


def test_one_vocabulary_across_commands(capsys, monkeypatch):
    """Issue 42: ``-c`` is ``--config`` in train (LightningCLI's) and no longer a short flag of
    ``--checkpoint`` (kept working, hidden, with a deprecation note); ``-o`` is a folder everywhere;
    view has predict's ``--regions`` / ``--level``; evaluate's ``-q`` says what it quiets there;
    evaluate reads predict's 0-based labels by default (``--first-label auto``)."""
    from hiseg.cli import build_parser

    seen = {sub: help_options(capsys, monkeypatch, sub) for sub in ("predict", "view", "evaluate", "ensemble")}
    for sub in ("predict", "view"):
        assert seen[sub]["--checkpoint"][0] == "--checkpoint CKPT" and "-c" not in {
            f.split()[0] for flags, _ in seen[sub].values() for f in flags.split(", ")}
        args = build_parser(sub).parse_args([sub, "x.png", "-o", "o", "-c", "bsds500"])
        assert args.checkpoint == "bsds500"
        assert "-c is deprecated: write --checkpoint (-c is --config in hiseg train)" in capsys.readouterr().err
    assert {seen[s]["--out"][0] for s in seen} == {"-o DIR, --out DIR"}
    assert seen["view"]["--regions"] == seen["predict"]["--regions"][:1] + ("12",)
    assert seen["view"]["--level"][0] == seen["predict"]["--level"][0] == "--level T"
    monkeypatch.setenv("COLUMNS", "10000")
    with pytest.raises(SystemExit):
        main(["evaluate", "--help"])
    text = capsys.readouterr().out
    quiet = next(ln for ln in text.splitlines() if ln.lstrip().startswith("-q, --quiet"))
    assert "predict" not in quiet and "no progress bar" in quiet
    assert seen["evaluate"]["--first-label"] == ("--first-label {auto,1,0}", "auto")
    assert build_parser("evaluate").parse_args(["evaluate", "p", "--gt", "g", "--first-label", "0"]).first_label == 0


@pytest.mark.slow
def test_train_help_calls_fit_the_default_not_required():
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    r = subprocess.run([sys.executable, str(root / "train.py"), "--help"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "(required)" not in r.stdout and "fit when none is given" in r.stdout


#: what building LightningCLI's parser imports: a bare ``hiseg train`` help request must not
_PARSER_MODULES = ("torch", "pytorch_lightning", "lightning", "jsonargparse", "numpy")


def _train_help_in_a_fresh_interpreter(argv, cwd, script=False):
    """``hiseg train ARGV`` (or ``python train.py ARGV``) as the console script runs it, in a fresh
    interpreter in ``cwd``: (exit status, stdout, the parser's modules it imported)."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    if script:  # python train.py: the script's own folder on the path, its name as argv[0]
        call = ("import runpy\nsys.argv = ['train.py', *%r]\nsys.path.insert(0, %r)\n"
                "runpy.run_path(%r, run_name='__main__')" % (list(argv), str(root), str(root / "train.py")))
    else:  # the console script `hiseg`
        call = "from hiseg.cli import main\nsys.argv[0] = 'hiseg'\nsys.exit(main(['train', *%r]))" % (list(argv),)
    code = ("import json, sys\nstatus = None  # ran to its end\ntry:\n    %s\nexcept SystemExit as e:\n    status = e.code\n"
            "print(json.dumps([status, sorted(m for m in %r if m in sys.modules)]), file=sys.stderr)"
            % (call.replace("\n", "\n    "), _PARSER_MODULES))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=cwd)
    status, loaded = json.loads(r.stderr.strip().splitlines()[-1])
    return status, r.stdout, loaded


def _stored_help_applies() -> bool:
    from hiseg.training.help_texts import environment, load_stored

    data = load_stored()
    return data is not None and environment(list(data["environment"]["distributions"])) == data["environment"]


#: the stored texts apply only to the Python and package versions they were rendered with; in any other
#: environment `hiseg train --help` builds the live parser (correct, seconds) and these tests do not apply
needs_stored_help = pytest.mark.skipif(
    not _stored_help_applies(), reason="the stored train help texts were rendered with other versions of Python or "
    "the training packages: help builds the live parser here (python -m hiseg.training.help_render rewrites them)")


@needs_stored_help
@pytest.mark.parametrize("where", ["checkout", "elsewhere"])
@pytest.mark.parametrize("argv", [("--help",), ("-h",), ("fit", "--help")], ids=" ".join)
def test_train_help_imports_no_torch_and_lists_the_subcommands(argv, where, tmp_path):
    """Issue 42: ``hiseg train --help`` (and ``fit --help``) answers without building LightningCLI's
    parser (no torch, no Lightning imported: the stored text of :mod:`hiseg.training.help_texts`),
    in a checkout (the default run's config) and elsewhere (none), and says fit is the default."""
    from pathlib import Path

    cwd = Path(__file__).resolve().parents[2] if where == "checkout" else tmp_path
    status, out, loaded = _train_help_in_a_fresh_interpreter(argv, cwd)
    assert status in (0, None) and loaded == [], (status, loaded)
    assert out.startswith("usage: hiseg train ") and "(required)" not in out
    if argv[0] == "fit":
        assert "--trainer.max_epochs" in out and "--model.init_from" in out
        assert ("configs/synthetic.yaml" in out) == (where == "checkout")
    else:
        assert all(f"    {sub} " in out for sub in ("fit", "validate", "test")) and "fit when none is given" in out
        assert ("Subcommands: fit (default)" in out) == (where == "checkout")
    if where == "checkout":  # python train.py, the same help under its own name
        status, script_out, loaded = _train_help_in_a_fresh_interpreter(argv, cwd, script=True)
        assert status in (0, None) and loaded == [] and script_out.startswith("usage: train.py ")


@needs_stored_help
def test_stored_train_help_is_only_for_its_case(tmp_path, monkeypatch):
    """A stored help text answers only a bare help request, for the command name, default config
    (path and content) and environment it was rendered for; anything else is the live parser's."""
    from pathlib import Path

    from hiseg.training import help_texts

    root = Path(__file__).resolve().parents[2]
    monkeypatch.chdir(root)
    config = root / "configs" / "synthetic.yaml"
    text = help_texts.stored_help(["fit", "--help"], "hiseg train", config)
    assert text.startswith("usage: hiseg train [options] fit") and "['configs/synthetic.yaml']" in text
    assert help_texts.stored_help(["fit", "-h"], "hiseg train", config) == text
    assert help_texts.stored_help(["--help"], "train.py", config).startswith("usage: train.py ")
    for argv in (["fit", "--help", "--trainer.max_epochs", "1"], ["--trainer.max_epochs", "1", "--help"],
                 ["fit", "--bogus"], ["predict", "--help"], [], ["fit"]):
        assert help_texts.stored_help(argv, "hiseg train", config) is None, argv
    assert help_texts.stored_help(["--help"], "__main__.py train", config) is None  # python -m hiseg.cli: not stored
    edited = tmp_path / "configs" / "synthetic.yaml"  # the same path from another folder, other defaults
    edited.parent.mkdir()
    edited.write_text(config.read_text().replace("max_epochs: 10", "max_epochs: 11"))
    monkeypatch.chdir(tmp_path)
    assert help_texts.stored_help(["fit", "--help"], "hiseg train", edited) is None
    edited.write_text(config.read_text())  # the same content: the same help
    assert help_texts.stored_help(["fit", "--help"], "hiseg train", edited) == text
    real = help_texts.environment
    monkeypatch.setattr(help_texts, "environment", lambda names: {**real(names), "python": "2.7.18"})
    assert help_texts.stored_help(["fit", "--help"], "hiseg train", edited) is None


@pytest.mark.slow
def test_stored_train_help_is_what_the_live_parser_prints():
    """The stored texts are what LightningCLI's parser prints now, at the same width (rendered
    afresh in a clean interpreter: ``python -m hiseg.training.help_render --check``), so that they
    cannot go stale; rewrite them with ``python -m hiseg.training.help_render``."""
    import subprocess
    import sys

    from hiseg.training.help_render import OTHER_ENVIRONMENT

    r = subprocess.run([sys.executable, "-m", "hiseg.training.help_render", "--check"], capture_output=True,
                       text=True, timeout=600)
    if r.returncode == OTHER_ENVIRONMENT:
        pytest.skip(r.stdout.strip()[-500:])
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]


#: command lines the stored refusal answers (unknown options, their words, stray words), and ones
#: it leaves to the live parser (a bad value, a nested option it cannot judge, a config named)
REFUSED = [("--bogus", "1"), ("fit", "--bogus"), ("fitt",), ("fit", "--trainer.max_epochz", "2"),
           ("validate", "--nope=3", "x"), ("--model.lr", "0.1", "--bogus=2")]
LEFT_TO_THE_PARSER = [("--trainer.max_epochs", "2"), ("--data.init_args.x", "1", "--bogus"), ("--model.lr",),
                      ("--config", "configs/bsds500.yaml", "--bogus"), ("--bogus", "--help"), ()]


@needs_stored_help
@pytest.mark.slow
def test_stored_refusals_are_the_live_parsers():
    """An unknown option or a stray word gets, without torch, exactly what LightningCLI's parser
    prints (usage, tip, the unrecognized words) and its exit status 2; what the stored text
    cannot judge is left to the parser."""
    import os
    from pathlib import Path

    from hiseg.training import help_texts

    from hiseg.training.help_render import live_refusal

    root = Path(__file__).resolve().parents[2]
    saved = Path.cwd()
    os.chdir(root)
    try:
        config = root / "configs" / "synthetic.yaml"
        for argv in REFUSED:
            stored = help_texts.stored_option_error(argv, "hiseg train", config)
            status, live = live_refusal(argv, "hiseg train", "configs/synthetic.yaml")
            assert status == 2 and stored == live, (argv, stored[-300:] if stored else stored, live[-300:])
        for argv in LEFT_TO_THE_PARSER:
            assert help_texts.stored_option_error(argv, "hiseg train", config) is None, argv
    finally:
        os.chdir(saved)


@needs_stored_help
def test_an_unknown_train_option_is_refused_without_torch(tmp_path):
    """``hiseg train --bogus 1`` and ``python train.py fit --bogus``: the refusal and status 2
    without building the parser (no torch, no Lightning imported)."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    for argv, script in ((("--bogus", "1"), False), (("fit", "--bogus"), True)):
        status, _, loaded = _train_help_in_a_fresh_interpreter(argv, root, script=script)
        assert status == 2 and loaded == [], (argv, status, loaded)


def test_docs_cli_table_is_the_help(capsys, monkeypatch):
    """``docs/cli.md``'s table says which command has which option: each row agrees with each
    command's ``--help``."""
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "cli.md").read_text(encoding="utf-8")
    table = text[text.index("| option |"):].split("\n\n")[0]
    header, _, *rows = table.splitlines()
    commands = [c.strip() for c in header.strip("|").split("|")][2:]
    assert commands == ["predict", "view", "evaluate", "ensemble"]
    seen = {sub: help_options(capsys, monkeypatch, sub) for sub in commands}
    checked = 0
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        long = re.findall(r"--[a-z][\w-]*", cells[0].split("`")[1])
        if not long:  # the positional inputs
            continue
        for sub, cell in zip(commands, cells[2:]):
            assert (long[0] in seen[sub]) == (cell != "—"), f"docs/cli.md: {long[0]} in hiseg {sub}: {cell!r}"
            checked += 1
    assert checked >= 40
