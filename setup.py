"""Build hook (everything else is in pyproject.toml): the shipped weights, ``models/*.ckpt``,
go into the wheel as package data under ``hiseg/weights/``, where
:func:`hiseg.models.weights.weights_dirs` finds them in a non-editable install. The
repository keeps them in ``models/`` (an editable install reads them there)."""
import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

MODELS = Path(__file__).resolve().parent / "models"


class BuildWithWeights(build_py):
    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            return  # editable installs read models/ in place
        ckpts = sorted(MODELS.glob("*.ckpt"))
        if not ckpts:
            raise SystemExit(f"setup.py: no shipped weights (*.ckpt) in {MODELS}: the wheel would not "
                             "load `bsds500`; build from a full checkout or source archive")
        out = Path(self.build_lib) / "hiseg" / "weights"
        out.mkdir(parents=True, exist_ok=True)
        for ck in ckpts:
            shutil.copyfile(ck, out / ck.name)

    def get_outputs(self, include_bytecode=True):
        out = Path(self.build_lib) / "hiseg" / "weights"
        return super().get_outputs(include_bytecode) + [str(out / p.name) for p in sorted(MODELS.glob("*.ckpt"))]


setup(cmdclass={"build_py": BuildWithWeights})
