"""Weather translators' speed beside a steering model's, measured in the same run.

For each translator (the shipped ones; before they are shipped, untrained translators of the shipped
configuration: the speed does not depend on the weights) on 320x240 frames, images/s of:

* ``translate``: whole frames in, translated frames out (resize to the 128-pixel short side, encode, decode,
  resize back; MUNIT draws a style per frame): what ``lidarmt camera fuzz --transforms munit-night`` pays;
* ``encode``: the content codes alone (once per frame in a style search);
* ``decode``: one decoder pass per frame from cached content codes with a new style, resize back included:
  what TACTIC's ES pays per candidate style and frame;

and the steering model's own ``predict`` images/s on the same frames (``--model``, default ``dave-orig``,
TACTIC's main subject), as ratios ``translate / model`` and ``decode / model``: how many times slower a learned
weather is than the model it tests. On the CPU with ``--threads`` torch threads (default 1: the machines are
shared; DEVELOPERS.md), and on a GPU when CUDA is available (``--device auto``; ``cpu`` skips it), where the
translators and the model run on the device and frames are resized on the CPU.

Usage: ``python benchmarks/bench_translate.py [--frames 16] [--repeats 3] [--translators a,b] [--model NAME]
[--device auto|cpu|cuda] [--threads 1]``. Writes ``benchmarks/results/translate.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from lidarmt._machine import describe as _describe_machine  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "translate.json"
UDACITY = ROOT.parent / "shared" / "data" / "udacity"
#: The shipped translators' configuration (see their model cards).
SHIPPED_NET = {"dim": 16, "n_res": 2, "style_dim": 8, "mlp_dim": 256, "dis_dim": 32, "dis_layers": 4, "dis_scales": 3}


def frames(n: int) -> tuple[np.ndarray, str]:
    """``n`` 320x240 RGB frames: held-back Udacity frames when ../shared/data is there, else noise."""
    if UDACITY.is_dir():
        from lidarmt.camera.sources.factory import open_images

        with open_images(UDACITY) as src:
            idx = np.linspace(1200, min(1499, len(src) - 1), n).round().astype(int)
            return np.stack([src[int(i)].image for i in idx]), str(UDACITY)
    rng = np.random.default_rng(0)
    return rng.integers(0, 256, (n, 240, 320, 3), dtype=np.uint8), "synthetic noise"


def untrained(folder: Path) -> list[tuple[str, Path]]:
    """UNIT and MUNIT translator files of the shipped configuration with their initial weights."""
    from lidarmt.camera.translate.nets import NetConfig
    from lidarmt.camera.translate.train import TrainConfig, Trainer, export_translator

    out = []
    for arch in ("unit", "munit"):
        cfg = TrainConfig(domain_a="-", domain_b="-", out=str(folder), net=NetConfig(arch=arch, **SHIPPED_NET),
                          size=128, load_size=128)
        path = folder / f"{arch}-untrained.pt"
        export_translator(Trainer(cfg), path, cfg=cfg, iteration=0)
        out.append((f"{arch}-untrained", path))
    return out


def best_rate(fn, n: int, repeats: int, *, sync=None) -> float:
    """Images/s of ``fn`` (which handles ``n`` images) from the median of ``repeats`` timed calls (one warm-up)."""
    fn()
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        if sync is not None:
            sync()
        times.append(time.perf_counter() - t)
    return n / statistics.median(times)


def measure(name: str, spec: str | Path, batch: np.ndarray, model, *, device: str, repeats: int) -> dict:
    from lidarmt.camera.translate.model import LearnedTranslator

    tr = LearnedTranslator(name, spec, device=device)
    n = len(batch)
    h, w = batch.shape[1:3]
    sync = None
    if device.startswith("cuda"):
        import torch

        sync = torch.cuda.synchronize
    style = tr.random_styles(1, 1)[0] if tr.style_dim else None
    content = tr.encode(batch)
    row = {"translator": name, "arch": tr.arch, "device": device, "parameters": tr.parameters,
           "work_size": list(tr.work_size(h, w)),
           "translate_images_per_s": best_rate(lambda: tr.translate(batch, seed=0), n, repeats, sync=sync),
           "encode_images_per_s": best_rate(lambda: tr.encode(batch), n, repeats, sync=sync),
           "decode_images_per_s": best_rate(lambda: tr.decode(content, style, (h, w)), n, repeats, sync=sync)}
    row["model_images_per_s"] = best_rate(lambda: model.predict(batch), n, repeats, sync=sync)
    row["translate_over_model"] = row["translate_images_per_s"] / row["model_images_per_s"]
    row["decode_over_model"] = row["decode_images_per_s"] / row["model_images_per_s"]
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--frames", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--translators", default="", help="names or translator.pt paths (default: the shipped ones)")
    ap.add_argument("--model", default="dave-orig", help="the steering model to compare with")
    ap.add_argument("--device", default="auto", help="auto (also time the GPU when CUDA is there), cpu, cuda")
    ap.add_argument("--threads", type=int, default=1, help="torch threads on the CPU")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    import torch

    from lidarmt._atomic import atomic_write_text
    from lidarmt.camera.models.registry import get_model
    from lidarmt.camera.translate.registry import WEIGHTS_DIR, builtin_names
    from lidarmt.engine.campaign import environment
    from lidarmt.errors import UserError
    from lidarmt.lidar.perception.apollo.network import resolve_device

    try:
        gpu = resolve_device(args.device, flag="--device")
    except UserError as err:
        ap.error(str(err))
    load = [round(x, 2) for x in os.getloadavg()]
    torch.set_num_threads(max(1, args.threads))
    batch, source = frames(args.frames)
    with tempfile.TemporaryDirectory(prefix="bench-translate-") as tmp:
        if args.translators:
            specs = []
            for s in (x.strip() for x in args.translators.split(",") if x.strip()):
                p = Path(s)
                specs.append((p.parent.name if p.name == "translator.pt" else p.stem, p) if p.suffix == ".pt"
                             else (s, WEIGHTS_DIR / f"{s}.pt"))
            kind = "given"
        elif builtin_names():
            specs, kind = [(n, WEIGHTS_DIR / f"{n}.pt") for n in builtin_names()], "shipped"
        else:
            specs, kind = untrained(Path(tmp)), "untrained, shipped configuration"
        devices = ["cpu"] + ([gpu] if gpu != "cpu" else [])
        rows = []
        for dev in devices:
            model = get_model(args.model, **({} if dev == "cpu" else {"device": dev}))
            for name, path in specs:
                rows.append(measure(name, path, batch, model, device=dev, repeats=args.repeats))
                r = rows[-1]
                print(f"{r['translator']:<18} {r['device']:<6} translate {r['translate_images_per_s']:8.1f}  "
                      f"encode {r['encode_images_per_s']:8.1f}  decode {r['decode_images_per_s']:8.1f}  "
                      f"{args.model} {r['model_images_per_s']:8.1f} img/s   translate/model "
                      f"{r['translate_over_model']:.3f}  decode/model {r['decode_over_model']:.3f}", flush=True)
    print(f"{len(batch)} frames of 320x240 ({source}); translators: {kind}; torch threads {torch.get_num_threads()}")
    if gpu != "cpu":
        print(f"GPU: {torch.cuda.get_device_name(torch.device(gpu))}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(args.out, json.dumps({
        "benchmark": "translate", "command": " ".join(["benchmarks/bench_translate.py", *sys.argv[1:]]),
        "source": source, "frames": len(batch), "frame_size": [320, 240], "translators": kind,
        "model": args.model, "torch_threads": torch.get_num_threads(),
        "gpu": torch.cuda.get_device_name(torch.device(gpu)) if gpu != "cpu" else None,
        "loadavg_at_start": load, "machine": _describe_machine(), "rows": rows, "environment": environment()}, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
