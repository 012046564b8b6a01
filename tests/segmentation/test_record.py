"""The run record of a folder of ``hiseg predict``'s files (:mod:`hiseg.segmentation.record`) as
the library keeps it (issue 43, item 10): ``predict_file`` and ``predict_files`` with
``resume=True`` refuse, in one line naming the setting, to skip images whose files were made
with other settings or another model, as ``hiseg predict --resume`` does; and the command and the
library read each other's record. The truth of each case is the settings the test wrote with."""
import json
import warnings

import pytest
import torch
from tests.cli.test_cli_faults import PIPE, photos, run, snapshot

from hiseg.models import get_model
from hiseg.models.weights import save_weights
from hiseg.segmentation import Pipeline
from hiseg.segmentation.outputs import image_done, predict_file
from hiseg.segmentation.record import RECORD
from hiseg.segmentation.segmenter import Segmenter


def classical(fit_iterations=5):
    return Segmenter(None, device="cpu", pipeline=Pipeline.classical(8.0, fit_iterations))


def test_predict_file_resume_refuses_other_settings_and_skips_the_same(tmp_path):
    d, out = photos(tmp_path, "a.png", "b.png"), tmp_path / "out"
    for f in sorted(d.iterdir()):
        assert predict_file(classical(), f, out, n_regions=3) is not None
    assert json.loads((out / RECORD).read_text())["images"] == {"a": 0, "b": 0}
    before = snapshot(out)
    with pytest.raises(ValueError, match=rf"^predict_file\(resume=True\): {out} was written with n_regions=3, this "
                                         r"call asks for n_regions=4; call it with the same settings"):
        predict_file(classical(), d / "a.png", out, n_regions=4, resume=True)
    with pytest.raises(ValueError, match=r"written with pipeline\.fit_iterations=5, this call asks for "
                                         r"pipeline\.fit_iterations=7;"):
        predict_file(classical(7), d / "a.png", out, n_regions=3, resume=True)
    with pytest.raises(ValueError, match=r"written with the classical path and .*, this call asks for model Compact"):
        predict_file(Segmenter(get_model("compact_boundary_net", width=8), device="cpu"), d / "a.png", out,
                     n_regions=3, resume=True)
    assert snapshot(out) == before  # nothing read, nothing written
    assert predict_file(classical(), d / "a.png", out, n_regions=3, resume=True) is None  # the same: skipped
    # resume=False does it again with the new settings; the record then names them
    assert predict_file(classical(), d / "a.png", out, n_regions=4) is not None
    predict_file(classical(), d / "a.png", out, n_regions=4, resume=True)
    with pytest.raises(ValueError, match="written with n_regions=4, this call asks for n_regions=3"):
        predict_file(classical(), d / "a.png", out, n_regions=3, resume=True)


def test_predict_file_tells_networks_apart_by_their_weights(tmp_path):
    d, out = photos(tmp_path, "a.png"), tmp_path / "out"
    torch.manual_seed(0)
    one = get_model("compact_boundary_net", width=8)
    torch.manual_seed(1)
    other = get_model("compact_boundary_net", width=8)
    pipe = Pipeline(**PIPE)
    predict_file(Segmenter(one, device="cpu", pipeline=pipe), d / "a.png", out, n_regions=3)
    assert predict_file(Segmenter(one, device="cpu", pipeline=pipe), d / "a.png", out, n_regions=3,
                        resume=True) is None
    with pytest.raises(ValueError, match=r"written with model CompactBoundaryNet \(weights [0-9a-f]{16}\), this call "
                                         r"asks for model CompactBoundaryNet \(weights [0-9a-f]{16}\)"):
        predict_file(Segmenter(other, device="cpu", pipeline=pipe), d / "a.png", out, n_regions=3, resume=True)


def test_a_folder_of_hiseg_predict_is_resumed_by_the_library_with_its_checks(tmp_path, capsys):
    d, out = photos(tmp_path, "a.png"), tmp_path / "out"
    rc, _ = run(capsys, ["predict", str(d), "-o", str(out), "--classical", "--regions", "3", "-q"])
    assert rc == 0
    seg = Segmenter.classical(device="cpu")  # hiseg predict --classical's pipeline
    assert predict_file(seg, d / "a.png", out, n_regions=3, resume=True) is None
    with pytest.raises(ValueError, match=r"was written with n_regions=3, this call asks for n_regions=5"):
        predict_file(seg, d / "a.png", out, n_regions=5, resume=True)
    # and the other way round: a folder the library wrote is checked by hiseg predict --resume
    out2 = tmp_path / "out2"
    predict_file(seg, d / "a.png", out2, n_regions=3)
    rc, err = run(capsys, ["predict", str(d), "-o", str(out2), "--classical", "--regions", "3", "--resume", "-q"])
    assert rc == 0 and "warning" not in err
    rc, err = run(capsys, ["predict", str(d), "-o", str(out2), "--classical", "--regions", "4", "--resume"])
    assert rc == 2 and "written with --regions 3, this run asks for --regions 4" in err


def test_predict_file_resume_warns_of_files_the_record_does_not_name(tmp_path):
    d, out = photos(tmp_path, "a.png"), tmp_path / "out"
    predict_file(classical(), d / "a.png", out, n_regions=3)
    (out / RECORD).unlink()  # written by an older hiseg
    with pytest.warns(UserWarning, match=r"does not name: their settings cannot be checked; skipped as they are"):
        assert predict_file(classical(), d / "a.png", out, n_regions=4, resume=True) is None


def test_a_failed_predict_file_leaves_no_record_in_a_new_folder(tmp_path):
    d, out = photos(tmp_path, "a.png"), tmp_path / "out"
    (d / "b.png").write_bytes(b"not an image")
    with pytest.raises(Exception):
        predict_file(classical(), d / "b.png", out, n_regions=3)
    assert not out.exists()


def test_predict_files_resume_refuses_other_settings(tmp_path):
    from hiseg.segmentation.predict_ddp import predict_files

    torch.manual_seed(0)
    ck = save_weights(get_model("compact_boundary_net", width=8), tmp_path / "net.ckpt", metadata={"pipeline": PIPE})
    d, out = photos(tmp_path, "a.png", "b.png"), tmp_path / "out"
    files, kw = sorted(d.iterdir()), dict(trainer_kwargs=dict(accelerator="cpu", devices=1))
    seg = Segmenter.from_checkpoint(ck, device="cpu")
    assert predict_files(seg, files, out, n_regions=3, **kw) == []
    record = json.loads((out / RECORD).read_text())
    assert record["images"] == {"a": 0, "b": 0} and record["options"][0]["checkpoint"] == str(ck.resolve())
    (out / "b.mat").unlink()  # an interrupted run
    before = snapshot(out)
    with pytest.raises(ValueError, match=rf"^predict_files\(resume=True\): {out} was written with n_regions=3, this "
                                         r"call asks for n_regions=2;"):
        predict_files(seg, files, out, n_regions=2, resume=True, **kw)
    torch.manual_seed(1)
    ck2 = save_weights(get_model("compact_boundary_net", width=8), tmp_path / "net2.ckpt", metadata={"pipeline": PIPE})
    with pytest.raises(ValueError, match=r"written with model .*net\.ckpt, this call asks for model .*net2\.ckpt;"):
        predict_files(Segmenter.from_checkpoint(ck2, device="cpu"), files, out, n_regions=3, resume=True, **kw)
    assert snapshot(out) == before
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # every image is named in the record: no warning
        assert predict_files(seg, files, out, n_regions=3, resume=True, **kw) == []
    assert image_done(out, "b", True) and (out / "a.mat").read_bytes() == before["a.mat"]


def test_a_refused_write_leaves_the_record_naming_the_files_there(tmp_path):
    d, out = photos(tmp_path, "a.png"), tmp_path / "out"
    predict_file(classical(), d / "a.png", out, n_regions=3)
    with pytest.raises(FileExistsError):
        predict_file(classical(), d / "a.png", out, n_regions=4, overwrite=False)
    assert predict_file(classical(), d / "a.png", out, n_regions=3, resume=True) is None
    with pytest.raises(ValueError, match="written with n_regions=3, this call asks for n_regions=4"):
        predict_file(classical(), d / "a.png", out, n_regions=4, resume=True)
