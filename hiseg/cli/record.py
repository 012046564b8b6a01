"""The options of ``hiseg predict`` that its run record holds (:func:`output_options`); the
record itself (:class:`~hiseg.segmentation.record.RunRecord`, :data:`RECORD` in ``--out``), which
``--resume`` checks, is :mod:`hiseg.segmentation.record`'s: the library's resume checks it too."""
from __future__ import annotations

import json
from pathlib import Path

from ..segmentation.record import RECORD, RunRecord, checkpoint_identity, models_own
from .options import model_backend, model_name

__all__ = ["RECORD", "RunRecord", "output_options"]


def output_options(args) -> dict:
    """The options of ``args`` that decide what ``hiseg predict`` writes, by option name, as
    :data:`RECORD` holds them: the model (``checkpoint``: ``classical``, a shipped model's name or
    a checkpoint's resolved path; ``sha256``: its file's), the pipeline settings given (None: the
    model's), the cut, ``html``. Not ``--tile``, ``--device``, ``--workers``, ``--devices``: they
    change how a map is computed, not what (within float rounding: tiles of 512 and 256 against
    one pass, 3e-7 at most on a 623x801 working image with the shipped models), so that a run that
    ran out of memory can be resumed with smaller tiles."""
    name = model_name(args)
    backend, folder = model_backend(args)
    model = _identity(name, folder) if name != "classical" else {"checkpoint": name, "sha256": None}
    return json.loads(json.dumps({  # as read back from the file (lists, floats)
        **model, "scales": args.scales, "flip": args.flip, "linkage": args.linkage, "max-pixels": args.max_pixels,
        "regions": args.regions, "level": args.level, "min-region-size": args.min_region_size,
        "html": bool(args.html), "models-own": _models_own(str(folder) if folder is not None else name)}))


def _identity(spec: str, folder=None) -> dict:
    """The model ``spec`` as the record names it (:func:`~hiseg.segmentation.record.checkpoint_identity`);
    run from an exported folder (given, or a shipped model's exported form: ``folder``) by its
    manifest, which holds every file's sha256: the two backends' files are not mixed by a resume."""
    if folder is not None:
        from ..export.manifest import MANIFEST

        return checkpoint_identity(spec, Path(folder) / MANIFEST)
    return checkpoint_identity(spec)


def _models_own(spec: str):
    """The model's own values of the settings that default to it (:data:`~hiseg.segmentation.record.MODELS_OWN`): the
    pipeline its checkpoint holds, or the classical path's; None when the file cannot be read
    (loading it names why). An option given with the model's own value is then the same option
    as none given (the record compares their values)."""
    if Path(spec).is_dir():  # an exported model: its manifest's settings
        from ..export.manifest import ExportError, read_manifest

        try:
            m = read_manifest(spec, verify=False)
        except ExportError:
            return None
        p = m.get("pipeline") or {}
        return {"scales": [float(x) for x in m["network"].get("scales", [1.0])],
                "flip": bool(m["network"].get("flip", False)), "linkage": p.get("linkage"),
                "max-pixels": p.get("max_pixels")}
    import warnings

    from ..segmentation.backends import stored_pipeline
    from ..models.weights import CheckpointError, Weights, read_checkpoint
    from ..segmentation.pipeline import Pipeline, PipelineError

    try:
        if spec == "classical":
            pipe = Pipeline.classical()
        else:
            with warnings.catch_warnings():  # the loader's to give
                warnings.simplefilter("ignore")
                ck = read_checkpoint(Weights.resolve(spec))
            pipe = stored_pipeline(ck)
    except (OSError, ValueError, TypeError, KeyError, CheckpointError, PipelineError):
        return None
    return models_own(pipe)
