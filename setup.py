"""Build hook (everything else is in pyproject.toml): the shipped weights, ``models/*.ckpt``,
and their exported forms, ``models/*_onnx/`` (what the onnxruntime backend runs), go into the
wheel as package data under ``hiseg/weights/``, where :func:`hiseg.models.weights.weights_dirs`
finds them in a non-editable install. The repository keeps them in ``models/`` (an editable
install reads them there)."""
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
        for src, dst in _exported_files(out):
            dst.parent.mkdir(exist_ok=True)
            shutil.copyfile(src, dst)

    def get_outputs(self, include_bytecode=True):
        out = Path(self.build_lib) / "hiseg" / "weights"
        return (super().get_outputs(include_bytecode) + [str(out / p.name) for p in sorted(MODELS.glob("*.ckpt"))]
                + [str(dst) for _, dst in _exported_files(out)])


def _exported_files(out: Path):
    """(source, destination) of every file of the shipped exported forms (``models/*_onnx/*``)."""
    return [(f, out / d.name / f.name) for d in sorted(MODELS.glob("*_onnx")) if d.is_dir() for f in sorted(d.iterdir())
            if f.is_file()]


setup(cmdclass={"build_py": BuildWithWeights})
