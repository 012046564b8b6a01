"""``hiseg predict`` on several GPUs or nodes, on Lightning's own machinery.

``trainer.predict`` with DDP: each process reads its share of the images (a distributed
sampler, no image twice), runs the network on them, and a
:class:`~pytorch_lightning.callbacks.BasePredictionWriter` (:class:`PredictionFilesWriter`)
makes their hierarchies and writes the same files as ``hiseg predict``, byte for byte
(both go through :func:`hiseg.segmentation.outputs.predict_file`); ``hiseg predict --devices N`` runs it::

    from hiseg.segmentation.segmenter import Segmenter
    from hiseg.segmentation.predict_ddp import predict_files

    failures = predict_files(Segmenter(backend="torch"), sorted(Path("photos").glob("*.jpg")),
                             "out/", n_regions=12,
                             trainer_kwargs=dict(accelerator="gpu", devices=4, num_nodes=2, strategy="ddp"))

The same guarantees as ``hiseg predict``: one run at a time into a folder (the launching
process holds :func:`hiseg.io.folder_lock` on one node), existing files are refused before anything is
written (checked in every process, before the processes meet; ``overwrite=True`` replaces
them), every file is written atomically, and an image that fails (unreadable, ...) does not
stop the others: rank 0 prints the failures at the end and :func:`predict_files` returns them
(``(file, message)`` in input order; under ``strategy="ddp_spawn"`` only the printed report
reaches the calling process). No ``--html`` pages, and a checkpoint is needed (the classical
path has no network to distribute).
"""
from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path
from typing import Optional, Sequence

import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import BasePredictionWriter
from torch.utils.data import DataLoader, Dataset

from ..io import display_path, folder_lock, refuse_overwrite
from .outputs import image_done, output_paths, predict_file
from .segmenter import Segmenter

__all__ = ["predict_files", "PredictionFilesWriter", "IMAGE_ERRORS"]

#: The errors that stop one image, not the run (``hiseg.cli.options.PER_FILE_ERRORS``, which is a layer above).
IMAGE_ERRORS = (ValueError, FileNotFoundError)


def _first(batch):
    return batch[0]


class _Images(Dataset):
    """Item ``i``: the working image of ``files[i]`` (or the error that stopped its reading)."""

    def __init__(self, files: Sequence[Path], pipeline):
        self.files, self.seg = list(files), Segmenter(None, pipeline=pipeline)

    def __len__(self):
        return len(self.files)

    def __getitem__(self, i):
        try:
            return {"index": i, "image": self.seg.read(self.files[i])[0], "error": None}
        except IMAGE_ERRORS as e:
            return {"index": i, "image": None, "error": str(e)}


class _Network(pl.LightningModule):
    """The segmenter's network; ``predict_step``: an image's boundary map (or its error)."""

    def __init__(self, seg: Segmenter, tile: int):
        super().__init__()
        self.model, self.seg, self.tile = seg.model, seg, tile

    def transfer_batch_to_device(self, batch, device, dataloader_idx):
        return batch  # Segmenter.network_map moves the image itself

    def predict_step(self, item, batch_idx=0, dataloader_idx=0):
        if item["error"] is None:
            self.seg.device = self.device
            try:
                return {"index": item["index"], "pmap": self.seg.network_map(item["image"], self.tile), "error": None}
            except IMAGE_ERRORS as e:
                item = dict(item, error=str(e))
        return {"index": item["index"], "error": item["error"]}


class PredictionFilesWriter(BasePredictionWriter):
    """Writes ``hiseg predict``'s files of each predicted image into ``out``
    (:func:`hiseg.segmentation.outputs.predict_file` with the network's boundary map); ``failures``:
    ``(file, message)`` of the images that failed, gathered from every process at the end."""

    def __init__(self, pipeline, files: Sequence[Path], out, tile: int = 512, n_regions: Optional[int] = None,
                 threshold: Optional[float] = None, min_size="auto", overwrite: bool = True, resume: bool = False):
        super().__init__("batch")
        self.seg, self.files, self.out = Segmenter(None, pipeline=pipeline), list(files), Path(out)
        self.cut = dict(tile=tile, n_regions=n_regions, threshold=threshold, min_size=min_size, overwrite=overwrite,
                        resume=resume)
        self.failures: list = []

    def write_on_batch_end(self, trainer, pl_module, prediction, batch_indices, batch, batch_idx, dataloader_idx=0):
        i = prediction["index"]
        f = self.files[i]
        if prediction["error"] is None:
            try:
                done = predict_file(self.seg, f, self.out, boundary=prediction["pmap"], record=False,  # predict_files'
                                    **self.cut)
                caught = [] if done is None else done[2]
            except IMAGE_ERRORS as e:
                prediction = dict(prediction, error=str(e))
            else:
                for msg in caught:
                    print(f"hiseg predict: warning: {f.name}: {msg}", file=sys.stderr)
        if prediction["error"] is not None:
            self.failures.append((i, str(f), prediction["error"]))

    def on_predict_end(self, trainer, pl_module):
        failures = self.failures
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            every = [None] * torch.distributed.get_world_size()
            torch.distributed.all_gather_object(every, failures)
            failures = [x for part in every for x in part]
        self.failures = [(name, msg) for _, name, msg in sorted(set(failures))]
        if trainer.is_global_zero and self.failures:
            print(f"hiseg.segmentation.predict_ddp: error: {len(self.failures)} of {len(self.files)} image(s) failed:",
                  file=sys.stderr)
            for name, msg in self.failures:
                print(f"  {name}: {msg}", file=sys.stderr)


def predict_files(segmenter: Segmenter, files: Sequence, out, *, n_regions: Optional[int] = None,
                  threshold: Optional[float] = None, min_size="auto", tile: int = 512, overwrite: bool = False,
                  trainer_kwargs: Optional[dict] = None, num_workers: int = 0, resume: bool = False,
                  lock: bool = True, record: bool = True) -> list:
    """Write ``hiseg predict``'s files of the image ``files`` into ``out`` with
    ``pl.Trainer(**trainer_kwargs).predict`` (e.g. ``devices=4, strategy="ddp"``; default:
    Lightning's ``auto``). ``num_workers``: the DataLoader's image-decoding processes per
    device. Without ``overwrite`` the files are created exclusively (an existing one is
    refused before anything runs, one made meanwhile by another run stops this one with
    FileExistsError naming it);
    ``resume``: the images whose files are all present and complete are skipped
    (:func:`hiseg.segmentation.outputs.image_done`), the others done again. ``record``: keep the
    folder's run record (:class:`hiseg.segmentation.record.RunRecord`, in the first process), and
    with ``resume`` refuse (ValueError naming each setting that differs) images whose files were made
    with other settings or another model, as ``hiseg predict --resume`` does (False: the caller
    keeps it, as ``hiseg predict --devices N`` does). ``lock``: hold :func:`hiseg.io.folder_lock`
    on ``out`` in the launching process (False: the caller holds it). Returns the failed images,
    ``(file, message)`` (see the module docstring)."""
    if segmenter.model is None:
        raise ValueError("predict_files distributes a torch network: give Segmenter(..., backend='torch') (onnxruntime "
                         "and the classical path run on the CPU: use `hiseg predict --workers N`)")
    files = [Path(f) for f in files]
    stems = [f.stem for f in files]
    if len(set(stems)) != len(stems):
        raise ValueError(f"several files share an output name: {sorted({s for s in stems if stems.count(s) > 1})[:5]}")
    refuse_overwrite([p for s in stems for p in output_paths(out, s).values()], files, overwrite=overwrite or resume,
                     command="hiseg.segmentation.predict_ddp")
    # one run at a time into a folder: the launching process (local rank 0) of a one-node run holds the lock
    # (``lock=False``: the caller holds it, as hiseg predict does); several nodes: unlocked (a lock on a shared
    # file system is not reliable), each file still created exclusively
    nodes = int((trainer_kwargs or {}).get("num_nodes", 1) or 1)
    launcher = lock and nodes == 1 and os.environ.get("LOCAL_RANK", "0") == "0"
    with (folder_lock(out, "hiseg predict") if launcher else contextlib.nullcontext()):
        book = _Book(segmenter, files, out, n_regions, threshold, min_size, overwrite, resume) if record else None
        if resume:
            cut = n_regions is not None or threshold is not None
            files = [f for f in files if not image_done(out, f.stem, cut)]
            if book is not None:
                book.skipped({f.stem for f in files})
            if not files:
                return []
        if book is None:
            return _predict_files(segmenter, files, out, n_regions, threshold, min_size, tile, overwrite,
                                  trainer_kwargs, num_workers, resume)
        book.begin(files)
        try:
            failures = _predict_files(segmenter, files, out, n_regions, threshold, min_size, tile, overwrite,
                                      trainer_kwargs, num_workers, resume)
        except BaseException:
            book.stopped(files)
            raise
        book.end(files, failures)
        return failures


class _Book:
    """The run record of :func:`predict_files`' folder (:class:`hiseg.segmentation.record.RunRecord`):
    checked before the run (``resume``: ValueError for images made otherwise), written in the first
    process only (:func:`hiseg._lifetime.first_process`, read before the run starts)."""

    def __init__(self, segmenter, files, out, n_regions, threshold, min_size, overwrite, resume):
        from .._lifetime import first_process
        from .record import RunRecord, call_options

        self.out, self.overwrite, self.first = Path(out), overwrite or resume, first_process()
        self.record, self.wanted = RunRecord(out), call_options(segmenter, n_regions, threshold, min_size)
        self.present = {f.stem for f in files if any(os.path.lexists(p) for p in output_paths(out, f.stem).values())}
        self.unknown = (self.record.check_resume(self.wanted, [f.stem for f in files if f.stem in self.present], out,
                                                 call="predict_files") if resume else [])

    def skipped(self, todo: set) -> None:
        """Warn of the complete images that a resume skips unchecked (the record does not name them)."""
        unchecked = [s for s in self.unknown if s not in todo]
        if unchecked and self.first:
            import warnings

            warnings.warn(f"predict_files(resume=True): {display_path(self.out)} has the files of {len(unchecked)} "
                          f"image(s), e.g. {display_path(unchecked[0])}, that its run record does not name: their "
                          "settings cannot be checked; skipped as they are (resume=False does them again)",
                          stacklevel=3)

    def begin(self, files) -> None:
        if self.first:
            self.record.assign(self.wanted, [f.stem for f in files], self.present, self.overwrite)
            self.record.save()

    def stopped(self, files) -> None:
        """The run stopped: a record it made for a folder it wrote nothing into goes (the others
        stay as they are: an --overwrite's images are between the two runs, :class:`RunRecord`)."""
        if self.first and not self.record.found and not any(
                os.path.lexists(p) for f in files for p in output_paths(self.out, f.stem).values()):
            self.record.discard()

    def end(self, files, failures) -> None:
        if self.first:
            failed = {Path(name).stem for name, _ in failures}
            self.record.finish([f.stem for f in files], {f.stem for f in files} - failed)
            self.record.save()


def _predict_files(segmenter, files, out, n_regions, threshold, min_size, tile, overwrite, trainer_kwargs,
                   num_workers, resume) -> list:
    """:func:`predict_files` once its folder is this run's and the images to do are known."""
    writer = PredictionFilesWriter(segmenter.pipeline, files, out, tile, n_regions, threshold, min_size, overwrite,
                                   resume)
    kw = dict(logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    trainer = pl.Trainer(callbacks=[writer], **{**kw, **(trainer_kwargs or {})})
    loader = DataLoader(_Images(files, segmenter.pipeline), batch_size=1, collate_fn=_first, num_workers=num_workers)
    trainer.predict(_Network(segmenter, tile), loader, return_predictions=False)
    return writer.failures
