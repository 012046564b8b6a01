"""hiseg/_compat.py lists every private member of another package that hiseg uses: each one
still exists in the installed version, and hiseg/ uses no unlisted one."""
import argparse
import importlib
import re
from pathlib import Path

import pytest
import sklearn

from hiseg._compat import PRIVATE_FORMATS, PRIVATE_MEMBERS

PKG = Path(__file__).resolve().parents[2] / "hiseg"


@pytest.mark.parametrize("module, obj, attr, where, why", PRIVATE_MEMBERS, ids=lambda x: str(x)[:40])
def test_listed_private_member_exists(module, obj, attr, where, why):
    if attr == "_validate_data" and tuple(int(x) for x in sklearn.__version__.split(".")[:2]) >= (1, 6):
        pytest.skip("scikit-learn >= 1.6: the public validate_data is used")
    cls = getattr(importlib.import_module(module), obj)
    if attr == "_subcommand_parsers":  # an instance attribute, set by LightningCLI's parser setup
        src = importlib.import_module("pytorch_lightning.cli").__file__
        assert "self._subcommand_parsers" in Path(src).read_text()
    else:  # a class attribute, or one its instances get (ModelCheckpoint's counters)
        has = hasattr(cls, attr) or (obj in ("ModelCheckpoint", "ArgumentParser") and hasattr(cls(), attr)) \
            or (obj == "ExperimentWriter" and attr in Path(importlib.import_module(module).__file__).read_text()) \
            or (obj == "CSVLogger" and hasattr(cls("."), attr))
        assert has, f"{module}.{obj}.{attr} is gone: {why} ({where})"
    assert attr in (PKG.parent / where).read_text(), f"{where} no longer uses {attr}: remove it from the list"
    assert why


def test_hiseg_uses_no_unlisted_private_member():
    listed = {a for _, _, a, _, _ in PRIVATE_MEMBERS}
    ours = set()  # hiseg's own private names, defined somewhere in the package
    text = {p: p.read_text() for p in PKG.rglob("*.py")}
    for t in text.values():
        ours |= set(re.findall(r"(?:def|class)\s+(_\w+)", t)) | set(re.findall(r"__setattr__\(self, \"(_\w+)", t))
        ours |= {n for n in re.findall(r"self\.(_\w+)\s*[:=]", t) if n not in listed}
    pattern = re.compile(r"\b(?:self|super\(\)|parser|est|trainer|pl_module|cls|checkpoint)\.(_[a-z]\w*)")
    unlisted = {}
    for p, t in text.items():
        if p.name == "_compat.py":
            continue
        for name in pattern.findall(t):
            if name not in listed and name not in ours and not name.startswith("__"):
                unlisted.setdefault(name, []).append(p.name)
    assert not unlisted, f"private members of other packages not listed in hiseg/_compat.py: {unlisted}"
    assert "_trainer" not in {n for t in text.values() for n in pattern.findall(t)}, "use self.trainer (public)"
    assert PRIVATE_FORMATS


def test_one_list():
    """hiseg/_compat.py is the one list: no module keeps its own (hiseg.training.callbacks had one), and
    every private member that hiseg/training/callbacks.py uses of Lightning is in it."""
    import hiseg.training.callbacks

    assert not hasattr(hiseg.training.callbacks, "LIGHTNING_PRIVATE_MEMBERS")
    listed = {a for _, _, a, where, _ in PRIVATE_MEMBERS if where == "hiseg/training/callbacks.py"}
    assert {"_save_last_checkpoint", "_monitor_candidates", "_check_log_dir_exists"} <= listed


def test_argparse_actions_is_what_cli_train_reads():
    p = argparse.ArgumentParser()
    p.add_argument("--x", help="h")
    assert [a.dest for a in p._actions] == ["help", "x"]
