"""``lidarmt camera train-translator``, ``translators`` and ``translate`` end to end with tiny translators, and
their one-line refusals."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
cv2 = pytest.importorskip("cv2")

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _translators import image_folder, interrupt_training_at, tiny_translator  # noqa: E402

from lidarmt.camera.translate import registry  # noqa: E402
from lidarmt.cli import main  # noqa: E402

TINY_ARGS = ["--size", "16", "--dim", "4", "--n-res", "2", "--style-dim", "3", "--mlp-dim", "8", "--dis-dim", "4",
             "--dis-layers", "2", "--dis-scales", "1", "--set", "holdout=2", "--set", "log_every=1",
             "--sample-every", "2", "--checkpoint-every", "2", "--device", "cpu"]


def _error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    line = err.splitlines()[-1]
    assert line.startswith("lidarmt: error: ") and "Traceback" not in err
    return line


@pytest.fixture(scope="module")
def domains(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("domains")
    return image_folder(root / "a", seed=1), image_folder(root / "b", dark=True, seed=2)


@pytest.fixture(scope="module")
def translators(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("tr")
    return {arch: tiny_translator(root / arch, arch) for arch in ("munit", "unit")}


def _train(domains, out: Path, arch: str = "munit", *extra: str) -> int:
    a, b = domains
    return main(["camera", "train-translator", "--arch", arch, "--domain-a", str(a), "--domain-b", str(b),
                 "--out", str(out), *TINY_ARGS, *extra])


# ---------------------------------------------------------------------------------------------- training


@pytest.mark.parametrize("arch", ["munit", "unit"])
def test_train_translator_end_to_end(domains, tmp_path, capsys, arch):
    out = tmp_path / "run"
    assert _train(domains, out, arch, "--iterations", "3") == 0
    text = capsys.readouterr().out
    assert f"{arch} {out}: 3 iteration(s) (now 3)" in text and "translator.pt" in text
    assert {p.name for p in out.iterdir()} >= {"checkpoint.pt", "translator.pt", "config.json", "log.jsonl"}
    assert sorted(p.name for p in (out / "samples").iterdir()) == ["iter_0000002.png", "iter_0000003.png"]
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["net"]["arch"] == arch and cfg["net"]["dim"] == 4 and cfg["holdout"] == 2 and cfg["size"] == 16
    # refused without --resume/--force; --resume goes on with the run's own settings
    assert _train(domains, out, arch, "--iterations", "4") == 2
    assert "holds a translator run" in _error(capsys)
    assert main(["camera", "train-translator", "--out", str(out), "--resume", "--iterations", "4"]) == 0
    assert "1 iteration(s) (now 4)" in capsys.readouterr().out
    assert main(["camera", "train-translator", "--out", str(out), "--resume", "--dim", "8"]) == 2
    assert "--dim 8: the run in" in _error(capsys)
    assert main(["camera", "train-translator", "--out", str(out), "--resume", "--set", "lr=0.5"]) == 2
    assert "--set lr 0.5: the run in" in _error(capsys)


def test_train_translator_force_keeps_other_files(domains, tmp_path, capsys):
    out = tmp_path / "run"
    assert _train(domains, out, "unit", "--iterations", "2") == 0
    (out / "notes.txt").write_text("mine")
    assert _train(domains, out, "unit", "--iterations", "1", "--force") == 0
    assert (out / "notes.txt").read_text() == "mine"
    log = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in log] == [1]


def test_train_translator_refusals(domains, tmp_path, capsys):
    a, b = domains
    one = image_folder(tmp_path / "one", n=1)
    bad = image_folder(tmp_path / "bad", n=3)
    (bad / "x.png").write_bytes(b"not a png")
    cases = [
        (["--arch", "munit", "--domain-a", str(tmp_path / "nope"), "--domain-b", str(b)], "no such folder"),
        (["--arch", "munit", "--domain-a", str(one), "--domain-b", str(b)], "found 1 image(s)"),
        (["--arch", "munit", "--domain-a", str(bad), "--domain-b", str(b)], "x.png: not a readable image"),
        (["--arch", "munit", "--domain-a", str(a), "--domain-b", str(b), "--set", "lr_g=1"],
         "--set lr_g=...: unknown setting"),
        (["--arch", "munit", "--domain-a", str(a), "--domain-b", str(b), "--set", "lr"], "--set 'lr': use KEY=VALUE"),
        (["--arch", "gan", "--domain-a", str(a), "--domain-b", str(b)], "arch 'gan': expected one of unit, munit"),
        (["--domain-a", str(a), "--domain-b", str(b)], "--arch missing"),
        (["--arch", "munit", "--domain-a", str(a), "--domain-b", str(b), "--precision", "fp16"],
         "fp16 needs a CUDA device"),
        (["--arch", "munit", "--domain-a", str(a), "--domain-b", str(b), "--size", "18"],
         "--size 18: expected a multiple of 4"),
        (["--arch", "munit", "--domain-a", str(a), "--domain-b", str(b), "--device", "tpu"],
         "expected one of auto, cpu, cuda, cuda:N"),
    ]
    if not torch.cuda.is_available():
        cases.append((["--arch", "munit", "--domain-a", str(a), "--domain-b", str(b), "--device", "cuda"],
                      "no usable CUDA GPU"))
    for i, (args, message) in enumerate(cases):
        rest = [x for x in TINY_ARGS if x not in ("--device", "cpu")] if "--device" in args else TINY_ARGS
        rc = main(["camera", "train-translator", "--out", str(tmp_path / f"r{i}"), *rest, *args,
                   "--iterations", "1"])
        assert rc == 2, args
        assert message in _error(capsys), args


def test_train_translator_corrupt_checkpoint(domains, tmp_path, capsys):
    out = tmp_path / "run"
    assert _train(domains, out, "munit", "--iterations", "2") == 0
    (out / "checkpoint.pt").write_bytes(np.random.default_rng(0).bytes(5000))
    assert main(["camera", "train-translator", "--out", str(out), "--resume"]) == 2
    assert "not a translator checkpoint" in _error(capsys)


def test_ctrl_c_says_how_to_resume(domains, tmp_path, capsys, monkeypatch):
    out = tmp_path / "run"
    interrupt_training_at(monkeypatch, 3)
    assert _train(domains, out, "munit", "--iterations", "4") == 130
    err = capsys.readouterr().err
    assert f"interrupted at iteration 3; {out / 'checkpoint.pt'} (iteration 2) is intact" in err
    assert f"lidarmt camera train-translator --out {out} --resume" in err
    monkeypatch.undo()  # the real step again
    assert main(["camera", "train-translator", "--out", str(out), "--resume"]) == 0
    assert "2 iteration(s) (now 4)" in capsys.readouterr().out


# ---------------------------------------------------------------------------------------------- listing


def test_translators_list_and_detail(translators, tmp_path, monkeypatch, capsys):
    w = tmp_path / "weights"
    w.mkdir()
    shutil.copyfile(translators["munit"], w / "munit-tiny.pt")
    shutil.copyfile(translators["unit"], w / "unit-tiny.pt")
    (w / "munit-tiny.md").write_text("# munit-tiny\n\nA learned stand-in, not a reproduction.\n")
    (w / "munit-tiny.json").write_text(json.dumps({"weather": "night", "ssim_to_source": 0.61234,
                                                   "fid_like": 1.5}))
    monkeypatch.setattr(registry, "WEIGHTS_DIR", w)
    monkeypatch.setattr(registry, "entry_points", lambda group: [])
    assert main(["camera", "translators"]) == 0
    out = capsys.readouterr().out
    for text in ("munit-tiny", "unit-tiny", "ssim_to_source", "0.612", "fid_like", "night"):
        assert text in out
    assert "procedural_gap" not in out  # only the numbers that are present get a column
    assert main(["camera", "translators", "munit-tiny"]) == 0
    out = capsys.readouterr().out
    assert "A learned stand-in, not a reproduction." in out and "parameters" in out
    assert main(["camera", "translators", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [t["name"] for t in doc["translators"]] == ["munit-tiny", "unit-tiny"]
    assert doc["translators"][1]["style_dim"] == 0
    assert main(["camera", "translators", str(translators["unit"]), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["arch"] == "unit"
    assert main(["camera", "translators", "munit-fog"]) == 2
    assert "unknown translator 'munit-fog'; available: munit-tiny, unit-tiny" in _error(capsys)


# ------------------------------------------------------------------------------------------- translating


@pytest.mark.slow
def test_translate_end_to_end(translators, domains, tmp_path, capsys):
    src = image_folder(tmp_path / "src", n=5, size=(30, 44), seed=5)
    out = tmp_path / "out"
    args = ["camera", "translate", "--translator", str(translators["munit"]), "--images", str(src), "--device",
            "cpu", "--batch-size", "2"]
    assert main([*args, "--out", str(out), "--limit", "4", "--seed", "3"]) == 0
    assert "translated 4 frame(s)" in capsys.readouterr().out
    files = sorted(p.name for p in out.iterdir())
    assert files == ["000.png", "001.png", "002.png", "003.png", "translate.json"]
    img = cv2.imread(str(out / "001.png"))
    assert img.shape == (30, 44, 3)
    doc = json.loads((out / "translate.json").read_text())
    assert doc["frames"] == 4 and doc["seed"] == 3 and len(doc["outputs"][0]["style"]) == 3
    # the same seed gives the same frames whatever the batching; another seed other frames
    again = tmp_path / "again"
    assert main([*args[:-2], "--batch-size", "3", "--out", str(again), "--limit", "4", "--seed", "3"]) == 0
    assert all((out / f).read_bytes() == (again / f).read_bytes() for f in files[:-1])
    other = tmp_path / "other"
    assert main([*args, "--out", str(other), "--limit", "4", "--seed", "4"]) == 0
    assert (out / "000.png").read_bytes() != (other / "000.png").read_bytes()
    # never overwrite without --force
    assert main([*args, "--out", str(out)]) == 2
    assert "is not empty" in _error(capsys)
    assert main([*args, "--out", str(out), "--force", "--style", "0,0,1"]) == 0
    assert json.loads((out / "translate.json").read_text())["style"] == [0.0, 0.0, 1.0]
    assert main([*args, "--out", str(tmp_path / "sf"), "--style-from", str(domains[1])]) == 0
    assert len(json.loads((tmp_path / "sf" / "translate.json").read_text())["style"]) == 3
    capsys.readouterr()


@pytest.mark.slow
def test_translate_refusals(translators, tmp_path, capsys):
    src = image_folder(tmp_path / "src", n=2)
    base = ["camera", "translate", "--images", str(src), "--device", "cpu"]
    cases = [
        (["--translator", str(translators["munit"]), "--style", "1,2"], "takes 3 finite numbers"),
        (["--translator", str(translators["munit"]), "--style", "a,b,c"], "expected 3 comma-separated numbers"),
        (["--translator", str(translators["munit"]), "--style", "1,2,3", "--style-from", str(src)], "give one"),
        (["--translator", str(translators["unit"]), "--style", "1,2,3"], "is unimodal and has no style"),
        (["--translator", "munit-fog"], "unknown translator 'munit-fog'"),
        (["--translator", str(tmp_path / "missing.pt")], "no such translator file"),
        (["--translator", str(translators["munit"]), "--limit", "0"], "--limit 0"),
    ]
    for i, (args, message) in enumerate(cases):
        assert main([*base, *args, "--out", str(tmp_path / f"o{i}")]) == 2, args
        assert message in _error(capsys), args
    junk = tmp_path / "junk.pt"
    junk.write_bytes(b"\x80\x04junk")
    assert main([*base, "--translator", str(junk), "--out", str(tmp_path / "j")]) == 2
    assert "not a lidarmt translator file" in _error(capsys)
