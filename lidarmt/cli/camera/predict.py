"""``lidarmt camera predict``: a steering model's angle for each frame of an image source, its error against
the labels beside both baselines (always 0°, always the training mean) and the correlation, and a contact sheet of
frames with the label and the prediction drawn as steering arrows. Also the home of :func:`model_options`, the
``[MODEL:]KEY=VALUE`` parser every camera command with ``--model-option`` shares."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Any

import typer

from lidarmt.cli._common import console
from lidarmt.cli._options import ForceOutputOption

SHEET_FRAMES = 12
SHEET_COLUMNS = 4
SHEET_TILE_WIDTH = 320
LABEL_RGB = (40, 220, 40)
PREDICTION_RGB = (255, 70, 40)
TABLE_ROWS = 20


def register(app: typer.Typer) -> None:
    app.command("predict")(predict)


def run_predictions(model: Any, src: Any, *, frames: int | None, batch_size: int = 64) -> dict[str, Any]:
    """Predict every frame (the first ``frames``) of ``src``; models with history start once they have it.

    Returns ``indices``, ``frame_ids``, ``labels`` (NaN where absent) and ``predictions`` (radians) as lists.
    """
    import numpy as np

    from lidarmt.camera.errors import ModelError
    from lidarmt.camera.types import MAX_ANGLE_RAD

    n = len(src) if frames is None else min(frames, len(src))
    history = int(getattr(model.input_spec, "history", 0) or 0)
    indices, ids, labels, preds = [], [], [], []
    window: list[Any] = []
    batch: list[Any] = []
    meta: list[Any] = []

    def flush() -> None:
        if not batch:
            return
        images = np.stack(batch)
        y = np.asarray(model.predict(images), dtype=np.float64)
        if y.shape != (len(batch),) or not np.all(np.isfinite(y)) or np.any(np.abs(y) > MAX_ANGLE_RAD):
            raise ModelError(
                f"model {model.name}: predict returned {y.dtype} {y.shape} with "
                f"{int(np.sum(~(np.abs(y) <= MAX_ANGLE_RAD))) if y.size else 0} non-finite or out-of-range "
                f"value(s) for {len(batch)} images; a steering model must return (N,) finite angles in radians, "
                f"at most {MAX_ANGLE_RAD:g} (the limit campaigns apply)"
            )
        for (i, fid, lab), v in zip(meta, y, strict=True):
            indices.append(i)
            ids.append(fid)
            labels.append(math.nan if lab is None else float(lab))
            preds.append(float(v))
        batch.clear()
        meta.clear()

    shape = None
    for i in range(n):
        fr = src[i]
        img = fr.image
        if history:
            window.append(img)
            if len(window) > history + 1:
                window.pop(0)
            if len(window) < history + 1:
                continue
            if any(w.shape != img.shape for w in window):
                raise ModelError(
                    f"{src.path}: frames {i - history}..{i} differ in size; a model with history "
                    "needs frames of one size"
                )
            item = np.stack(window)
        else:
            item = img
        if shape is not None and item.shape != shape:
            flush()
        shape = item.shape
        batch.append(item)
        meta.append((fr.index, fr.frame_id, fr.label))
        if len(batch) >= batch_size:
            flush()
    flush()
    return {"indices": indices, "frame_ids": ids, "labels": labels, "predictions": preds}


def metrics(labels: list[float], predictions: list[float], *, train_mean: float | None = None,
            train_mean_source: str = "") -> dict[str, Any]:
    """Error against the labels (where present): MSE in rad², RMSE and MAE in degrees, Pearson correlation, and
    the two baselines any model must beat (:func:`lidarmt.camera.models.train.baselines`): always 0 (driving
    straight) and always the training mean (``train_mean``, radians, from the model's files; None: unknown)."""
    import numpy as np

    from lidarmt.camera.models.train import baselines

    y = np.asarray(labels, dtype=np.float64)
    p = np.asarray(predictions, dtype=np.float64)
    out: dict[str, Any] = {
        "frames": int(len(p)),
        "mean_abs_prediction_deg": float(np.degrees(np.abs(p)).mean()) if len(p) else None,
    }
    have = np.isfinite(y)
    out["labelled"] = int(have.sum())
    if have.any():
        e = p[have] - y[have]
        mse = float(np.mean(e**2))
        base = baselines(np.asarray([0.0 if train_mean is None else train_mean]), y[have])
        out.update(
            mse_rad2=mse,
            rmse_deg=math.degrees(math.sqrt(mse)),
            mae_deg=float(np.degrees(np.abs(e)).mean()),
            mean_abs_label_deg=float(np.degrees(np.abs(y[have])).mean()),
            zero_mse_rad2=base["zero_mse"],
            zero_rmse_deg=math.degrees(math.sqrt(base["zero_mse"])),
            mse_ratio_zero=mse / base["zero_mse"] if base["zero_mse"] > 0 else None,
            train_mean_rad=train_mean,
            train_mean_source=train_mean_source,
            mean_mse_rad2=base["mean_mse"] if train_mean is not None else None,
            mean_rmse_deg=math.degrees(math.sqrt(base["mean_mse"])) if train_mean is not None else None,
            mse_ratio_mean=(mse / base["mean_mse"] if train_mean is not None and base["mean_mse"] > 0 else None),
        )
        ok = have.sum() > 1 and np.std(p[have]) > 0 and np.std(y[have]) > 0
        out["correlation"] = float(np.corrcoef(p[have], y[have])[0, 1]) if ok else None
    return out


def baseline_line(m: dict[str, Any]) -> str:
    """The baselines as one line: always 0°, always the training mean (or why it is unknown), with the model's
    MSE as a fraction of each."""

    def ratio(r: float | None) -> str:
        return "" if r is None else f", model/baseline MSE {r:.2f}"

    line = f"baselines: always 0°: MSE {m['zero_mse_rad2']:.5f} rad², RMSE {m['zero_rmse_deg']:.2f}°" + ratio(
        m.get("mse_ratio_zero"))
    if m.get("train_mean_rad") is None:
        return line + f"; always the training mean: unknown ({m.get('train_mean_source') or 'not recorded'})"
    return line + (f"; always the training mean ({math.degrees(m['train_mean_rad']):+.2f}°, from "
                   f"{m['train_mean_source']}): MSE {m['mean_mse_rad2']:.5f} rad², RMSE {m['mean_rmse_deg']:.2f}°"
                   + ratio(m.get("mse_ratio_mean")))


def model_options(names: list[str], items: list[str] | None, *, json_values: bool = True,
                  recipe: str | None = None, flag: str = "--model-option") -> list[dict[str, Any]]:
    """The options of each model in ``names`` from ``[MODEL:]KEY=VALUE`` items, checked and resolved.

    MODEL is a model's number (1-based, in --model order) or its name as given in --model (or a model file's
    name); without it, an option goes to every model that takes it. A key no model (or not the named one) takes
    is one line naming the keys it does take. ``recipe`` (``--recipe FILE``) goes to the Keras models. A Keras
    model's recipe file (``recipe=`` or the sidecar beside the model) is merged in
    (:func:`lidarmt.camera.models.registry.resolve_options`), so the result is exactly what builds each model.
    """
    from lidarmt.camera.errors import CameraArgumentError
    from lidarmt.camera.models.registry import kind_of, option_keys, resolve_options
    from lidarmt.cli._common import json_value

    keys = [option_keys(n) for n in names]
    out: list[dict[str, Any]] = [{} for _ in names]

    def target_of(item: str, target: str) -> int:
        if target.isdigit():
            i = int(target)
            if 1 <= i <= len(names):
                return i - 1
        for i, n in enumerate(names):
            if target in (n, Path(n).name, Path(n).stem):
                return i
        raise CameraArgumentError(f"{flag} {item!r}: {target!r} is not one of the models given with --model "
                                  f"({', '.join(names)}); name it as given there or by its number 1..{len(names)}")

    def known(i: int) -> str:
        return f"{names[i]} takes {', '.join(keys[i])}" if keys[i] is not None else f"{names[i]} takes any"

    for item in items or []:
        head, sep, value = item.partition("=")
        target, colon, key = head.strip().rpartition(":")
        key = key.strip()
        if not sep or not key:
            raise CameraArgumentError(f"{flag} {item!r}: use [MODEL:]KEY=VALUE (e.g. crop=60:-25, or "
                                      "2:crop=60:-25 for the second --model)")
        val = json_value(value) if json_values else value.strip()
        if colon:
            i = target_of(item, target.strip())
            if keys[i] is not None and key not in keys[i]:
                raise CameraArgumentError(f"{flag} {item!r}: unknown option {key!r} for {names[i]}; "
                                          f"{known(i)}")
            out[i][key] = val
            continue
        takers = [i for i in range(len(names)) if keys[i] is None or key in keys[i]]
        if not takers:
            raise CameraArgumentError(f"{flag} {item!r}: unknown option {key!r}; "
                                      + "; ".join(known(i) for i in range(len(names))))
        for i in takers:
            out[i][key] = val
    if recipe is not None:
        keras = [i for i, n in enumerate(names) if kind_of(n) in ("keras", "onnx")]
        if not keras:
            raise CameraArgumentError(f"--recipe {recipe}: an input recipe is for Keras .h5 and ONNX models, and none of "
                                      f"{', '.join(names)} is one")
        for i in keras:
            out[i].setdefault("recipe", recipe)
    return [resolve_options(n, o) for n, o in zip(names, out, strict=True)]


def _arrow(img: Any, angle: float, colour: tuple[int, int, int], length: float, thickness: int) -> None:
    import cv2

    h, w = img.shape[:2]
    x0, y0 = w / 2.0, h - 6.0
    x1 = x0 - length * math.sin(angle)  # positive angle = left
    y1 = y0 - length * math.cos(angle)
    cv2.arrowedLine(
        img, (round(x0), round(y0)), (round(x1), round(y1)), colour, thickness, cv2.LINE_AA, tipLength=0.15
    )


def contact_sheet(src: Any, result: dict[str, Any], *, count: int = SHEET_FRAMES) -> Any:
    """An RGB picture of up to ``count`` evenly spaced predicted frames, each with the label (green) and the
    prediction (red) drawn as steering arrows from the bottom centre, and the angles written on top."""
    import cv2
    import numpy as np

    n = len(result["predictions"])
    picks = sorted({int(round(k)) for k in np.linspace(0, n - 1, min(count, n))}) if n else []
    tiles = []
    for k in picks:
        img = src[result["indices"][k]].image
        h = max(1, round(img.shape[0] * SHEET_TILE_WIDTH / img.shape[1]))
        tile = np.ascontiguousarray(cv2.resize(img, (SHEET_TILE_WIDTH, h), interpolation=cv2.INTER_AREA))
        lab, pred = result["labels"][k], result["predictions"][k]
        if math.isfinite(lab):
            _arrow(tile, lab, LABEL_RGB, 0.45 * h, 4)
        _arrow(tile, pred, PREDICTION_RGB, 0.45 * h, 2)
        cv2.rectangle(tile, (0, 0), (SHEET_TILE_WIDTH, 34), (0, 0, 0), -1)
        fid = str(result["frame_ids"][k])
        cv2.putText(
            tile,
            f"#{result['indices'][k]} {fid[-16:]}",
            (4, 13),
            cv2.FONT_HERSHEY_SIMPLEX,
            0.4,
            (255, 255, 255),
            1,
            cv2.LINE_AA,
        )
        if math.isfinite(lab):
            cv2.putText(
                tile,
                f"label {math.degrees(lab):+.1f}",
                (4, 29),
                cv2.FONT_HERSHEY_SIMPLEX,
                0.45,
                LABEL_RGB,
                1,
                cv2.LINE_AA,
            )
        cv2.putText(
            tile,
            f"pred {math.degrees(pred):+.1f} deg",
            (140, 29),
            cv2.FONT_HERSHEY_SIMPLEX,
            0.45,
            PREDICTION_RGB,
            1,
            cv2.LINE_AA,
        )
        tiles.append(tile)
    if not tiles:
        return np.zeros((40, SHEET_TILE_WIDTH, 3), np.uint8)
    th = max(t.shape[0] for t in tiles)
    cols = min(SHEET_COLUMNS, len(tiles))
    rows = -(-len(tiles) // cols)
    sheet = np.full((rows * (th + 4) + 4, cols * (SHEET_TILE_WIDTH + 4) + 4, 3), 255, np.uint8)
    for j, t in enumerate(tiles):
        r, c = divmod(j, cols)
        y, x = 4 + r * (th + 4), 4 + c * (SHEET_TILE_WIDTH + 4)
        sheet[y : y + t.shape[0], x : x + SHEET_TILE_WIDTH] = t
    return sheet


def check_picture_path(path: Path) -> None:
    """Refuse a picture name we cannot encode, before any work is done."""
    from lidarmt.camera.errors import CameraOutputError

    if path.suffix.lower() not in (".png", ".jpg", ".jpeg"):
        raise CameraOutputError(f"--out {path}: the picture must be a .png or .jpg file")
    if path.is_dir():
        raise CameraOutputError(f"--out {path} is a folder; give a file name such as sheet.png")


def write_picture(path: Path, rgb: Any) -> None:
    """Encode by the suffix (.png, .jpg) and write atomically."""
    import cv2

    from lidarmt._atomic import atomic_write_bytes
    from lidarmt.camera.errors import CameraOutputError

    check_picture_path(path)
    suffix = path.suffix.lower()
    ok, buf = cv2.imencode(suffix, cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR))
    if not ok:
        raise CameraOutputError(f"--out {path}: cannot encode the picture")
    atomic_write_bytes(path, buf.tobytes())


def predict(
    src_path: Annotated[
        Path,
        typer.Argument(
            metavar="SRC",
            help="Image source: a Udacity-style folder "
            "(center/ + steering.csv), a folder of images, a ROS1/ROS2 bag or "
            "an Apollo .record.",
        ),
    ],
    model_spec: Annotated[
        str,
        typer.Option(
            "--model",
            "-m",
            help="A model of 'lidarmt camera models', the path "
            "of a Keras .h5 or .onnx file, or package.module:callable.",
        ),
    ],
    model_option: Annotated[
        list[str] | None,
        typer.Option(
            "--model-option",
            help="key=value passed to the "
            "model's loader (Keras: preprocess=, crop=60:-25, frame=, resize=, colour=, scale=, output=, "
            "sign=, lambda=; zoo: weights=; a .pt: batch_size=); repeatable.",
        ),
    ] = None,
    recipe: Annotated[
        Path | None,
        typer.Option(
            "--recipe",
            help="A Keras model's input recipe as JSON (keys as --model-option; default: "
            "MODEL.h5.recipe.json beside the model when present).",
        ),
    ] = None,
    frames: Annotated[
        int | None, typer.Option("--frames", "-n", min=1, help="Predict only the first N frames.")
    ] = None,
    topic: Annotated[str | None, typer.Option("--topic", "-t", help="Image topic of a recording.")] = None,
    out: Annotated[
        Path | None,
        typer.Option(
            "--out",
            "-o",
            help="Write a contact sheet (PNG/JPG) of "
            f"{SHEET_FRAMES} evenly spaced frames with the label (green) and "
            "the prediction (red) as steering arrows.",
        ),
    ] = None,
    json_out: Annotated[
        bool, typer.Option("--json", help="Print every frame's angles and the metrics as JSON.")
    ] = False,
    device: Annotated[str, typer.Option(help="Where the model runs: auto (cuda when available), cpu, cuda or cuda:N.")] = "cpu",
    force: ForceOutputOption = False,
) -> None:
    """Predict the steering angle of each frame; with labels, the error (MSE in rad², RMSE in degrees).

    Angles are in radians internally, positive = left; tables show degrees. A model that cannot be loaded (bad
    file, unsupported Keras layer, an output that is not one angle per image) is one line on stderr, exit 2.

    Examples:

    `lidarmt camera predict ../shared/data/udacity --model dave2_udacity_simulator.h5 --out sheet.png`

    `lidarmt camera predict ../shared/data/udacity --model dave2 --frames 200 --json`

    `lidarmt camera predict ../shared/data/udacity --model runs/x/dave2.pt` (a model from `lidarmt camera train`)

    `lidarmt camera predict ../shared/data/udacity --model model.h5 --model-option frame=none --model-option crop=60:-25`
    """
    import json
    import sys

    from lidarmt._paths import check_writable
    from lidarmt.camera.models.registry import get_model
    from lidarmt.camera.sources import open_images

    if out is not None:
        check_picture_path(out)
        check_writable(out, inputs=(src_path, model_spec, recipe), force=force)
    from lidarmt.camera.errors import CameraArgumentError
    from lidarmt.camera.models.registry import training_mean
    from lidarmt.lidar.perception.apollo.network import resolve_device

    options = model_options([model_spec], model_option, json_values=False,
                            recipe=None if recipe is None else str(recipe))[0]
    device = resolve_device(device, flag="--device", error=CameraArgumentError)
    if device != "cpu":
        options.setdefault("device", device)
    model = get_model(model_spec, **options)
    train_mean, mean_source = training_mean(model_spec, options)
    with open_images(src_path, topic=topic) as src:
        from lidarmt.camera.models.zoo import history_note
        from lidarmt.cli._common import err_console

        if note := history_note(src, [model]):
            err_console.print(note, highlight=False, soft_wrap=True)
        result = run_predictions(model, src, frames=frames)
        sheet = contact_sheet(src, result) if out is not None else None
        from lidarmt.camera.models.registry import training_frames

        trained = training_frames(model_spec, options, src.labels())
    m = metrics(result["labels"], result["predictions"], train_mean=train_mean, train_mean_source=mean_source)
    if trained is not None:
        m["training_overlap"] = training_overlap(trained, result, train_mean=train_mean,
                                                 train_mean_source=mean_source)
    if out is not None:
        write_picture(out, sheet)
    if json_out:
        rows = [{"index": i, "frame_id": f, "label": None if math.isnan(lab) else lab, "prediction": p}
                for i, f, lab, p in zip(result["indices"], result["frame_ids"], result["labels"],
                                        result["predictions"], strict=True)]  # fmt: skip
        doc = {"model": model.name, "spec": model_spec, "options": options, "source": str(src_path),
               "input": {"height": model.input_spec.height, "width": model.input_spec.width,
                         "colour": model.input_spec.colour, "history": model.input_spec.history,
                         "note": model.input_spec.note},
               "metrics": m, "frames": rows, "sheet": str(out) if out is not None else None}  # fmt: skip
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
        return
    _print(model, src_path, result, m, out)


def training_overlap(trained: dict[str, Any], result: dict[str, Any], **kw: Any) -> dict[str, Any]:
    """How many predicted frames trained the model (``trained``: :func:`~lidarmt.camera.models.registry.
    training_frames`) and the metrics on the others alone (the held-out frames, None when there are none)."""
    stop = trained["stop"]
    keep = [k for k, i in enumerate(result["indices"]) if int(i) >= stop]
    held = (metrics([result["labels"][k] for k in keep], [result["predictions"][k] for k in keep], **kw)
            if keep else None)
    return {**trained, "trained_on": len(result["indices"]) - len(keep), "predicted": len(result["indices"]),
            "held_out": held}


def overlap_note(model_name: str, o: dict[str, Any]) -> str:
    """The line ``camera predict`` prints when frames it predicted trained the model."""
    line = (f"note: {o['trained_on']:,} of these {o['predicted']:,} frame(s) trained {model_name} (frames 0-"
            f"{o['stop'] - 1} of {o['data'] or 'its drive'}, per {o['card']}); the error on them is no test")
    h = o.get("held_out")
    if h and h.get("labelled"):
        line += f"; on the {h['labelled']:,} held-out frame(s) alone: RMSE {h['rmse_deg']:.2f}°"
    elif o["trained_on"] == o["predicted"]:
        line += f"; its held-out frames are {o['stop']}-{o['frames'] - 1}"
    return line


def _print(model: Any, src_path: Path, result: dict[str, Any], m: dict[str, Any], out: Path | None) -> None:
    from rich.table import Table

    n = len(result["predictions"])
    from lidarmt.cli._common import show

    t = Table(title=f"{show(model.name)} on {show(src_path)}", title_justify="left")
    for col in ("index", "frame_id", "label°", "prediction°", "error°"):
        t.add_column(col, justify="left" if col == "frame_id" else "right")
    for k in range(min(n, TABLE_ROWS)):
        lab, p = result["labels"][k], result["predictions"][k]
        has = math.isfinite(lab)
        t.add_row(str(result["indices"][k]), show(result["frame_ids"][k]),
                  f"{math.degrees(lab):+.2f}" if has else "-", f"{math.degrees(p):+.2f}",
                  f"{math.degrees(p - lab):+.2f}" if has else "-")  # fmt: skip
    console.print(t)
    if n > TABLE_ROWS:
        console.print(f"… {n - TABLE_ROWS} more frame(s); --json prints them all", highlight=False)
    line = (
        f"{n} frame(s); mean |prediction| {m['mean_abs_prediction_deg']:.2f}°" if n else "no frames predicted"
    )
    console.print(line, highlight=False)
    if m.get("labelled"):
        corr = m["correlation"]
        console.print(
            f"against {m['labelled']} label(s): MSE {m['mse_rad2']:.5f} rad², RMSE {m['rmse_deg']:.2f}°, "
            f"MAE {m['mae_deg']:.2f}°, Pearson correlation {'-' if corr is None else f'{corr:+.3f}'}",
            highlight=False,
        )
        console.print(baseline_line(m), highlight=False)
    o = m.get("training_overlap")
    if o and o["trained_on"]:
        console.print(overlap_note(model.name, o), highlight=False, markup=False, soft_wrap=True)
    if out is not None:
        console.print(f"contact sheet: {show(out)} (label green, prediction red)", highlight=False)
