"""``lidarmt camera models``: the steering models to test (zoo, plugins), and how to use Keras files."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from lidarmt.cli._common import console


def register(app: typer.Typer) -> None:
    app.command("models")(models)


def _keras_help() -> dict[str, Any]:
    from lidarmt.camera.models.keras import OUTPUT_NOTES, OUTPUTS, PRESETS, USAGE

    return {
        "usage": USAGE,
        "presets": {
            name: {"colour": p.colour, "note": p.note, "output": p.output} for name, p in PRESETS.items()
        },
        "outputs": {
            name: {"radians_per_unit": scale, "note": OUTPUT_NOTES[name]} for name, scale in OUTPUTS.items()
        },
        "default_preset": "dave2-udacity-sim when the network input is 66x200x3, else resize (RGB)",
    }


def _keras_detail(spec: str, options: dict[str, str]) -> dict[str, Any]:
    from lidarmt.camera.models.keras import load_keras

    model = load_keras(spec, **options)
    k = model.keras
    return {
        "name": model.name, "kind": "keras", "path": k.path, "keras_version": k.keras_version,
        "input": {"height": k.input_shape[0], "width": k.input_shape[1], "channels": k.input_shape[2],
                  "colour": model.input_spec.colour, "history": 0, "note": model.input_spec.note},
        "data_format": k.data_format, "preprocess": k.preset, "preprocess_note": k.preset_note,
        "output": k.output, "recipe": k.recipe, "options": dict(options),
        "lambdas": list(k.lambdas), "parameters": k.parameters, "layers": list(k.layers),
    }  # fmt: skip


def _onnx_detail(spec: str, options: dict[str, str]) -> dict[str, Any]:
    from lidarmt.camera.models import registry
    from lidarmt.camera.models.onnxmodel import load_onnx

    model = load_onnx(spec, **options)
    o = model.onnx
    return {"name": model.name, "kind": "onnx", "path": o.path, "sha256": registry.file_sha256(spec),
            "input": {"name": o.input_name, "layout": o.layout, "height": o.input_shape[0],
                      "width": o.input_shape[1], "channels": o.input_shape[2], "colour": model.input_spec.colour,
                      "history": 0, "note": model.input_spec.note},
            "output": o.output_name, "recipe": o.recipe, "options": dict(options),
            "coverage": "no: an ONNX model exposes no torch activations (coverage criteria need a torch module)"}


def _weights_detail(spec: str) -> dict[str, Any]:
    """A weights file from ``lidarmt camera train``: its architecture (from the project's table), input and
    training numbers; read as data, like any use of the file."""
    from lidarmt.camera.models import registry, zoo
    from lidarmt.camera.models.weightsfile import read_weights

    model = registry.get_model(spec)  # refuses unknown architectures and anything but tensors, in one line
    arch, _state, meta = read_weights(spec)
    info = zoo.describe(arch)
    mean, where = registry.training_mean(spec)
    cfg = meta.get("config") if isinstance(meta, dict) and isinstance(meta.get("config"), dict) else {}
    return {"name": spec, "kind": "weights", "architecture": arch, "title": info.get("title"),
            "input": info.get("input"), "parameters": meta.get("parameters") if isinstance(meta, dict) else None,
            "trained_on": cfg.get("data"), "seed": cfg.get("seed"),
            "train_mean_rad": mean, "train_mean_source": where, "card": model.card or None,
            "sha256": registry.file_sha256(spec)}


def models(
    spec: Annotated[
        str | None,
        typer.Argument(
            help="Show one model in detail: a zoo or plugin name, the path "
            "of a Keras .h5 or .onnx file (its layers or graph, input and preprocessing), or of a weights .pt from 'camera train'."
        ),
    ] = None,
    model_option: Annotated[
        list[str] | None,
        typer.Option(
            "--model-option",
            help="With a Keras file: key=value import option (preprocess=, crop=, frame=, resize=, colour=, "
            "scale=, output=, sign=, lambda=, recipe=FILE); repeatable.",
        ),
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print as JSON (for scripts).")] = False,
) -> None:
    """List the steering models: each zoo model with its input, history, parameters, model card and validation
    RMSE; installed plugins (entry-point group lidarmt.steering); and how to use a Keras .h5 file.

    Examples:

    `lidarmt camera models`

    `lidarmt camera models ../shared/data/models/dave2_udacity_simulator.h5`

    `lidarmt camera models --json`
    """
    import json
    import sys

    from lidarmt.camera.models import registry

    if spec is not None:
        if registry.is_keras_path(spec):
            from lidarmt.cli.camera.predict import model_options

            doc = _keras_detail(spec, model_options([spec], model_option, json_values=False)[0])
        elif registry.is_onnx_path(spec):
            from lidarmt.cli.camera.predict import model_options

            doc = _onnx_detail(spec, model_options([spec], model_option, json_values=False)[0])
        elif registry.is_weights_path(spec):
            doc = _weights_detail(spec)
        else:
            doc = registry.describe(spec)
        if json_out:
            sys.stdout.write(json.dumps(doc, indent=2, default=str) + "\n")
        else:
            _print_detail(doc)
        return
    entries = [registry.describe(name) for name in registry.available()]
    doc = {"models": entries, "keras": _keras_help(),
           "onnx": "an .onnx file by its path (onnxruntime; pip install \"lidarmt[onnx]\"): one image input "
                   "(N,C,H,W) or (N,H,W,C), one value per image; the same input-recipe options as Keras files; "
                   "no coverage (no torch activations)",
           "code": "package.module:callable returning a SteeringModel (imports code: refused from untrusted "
                   "files unless --trust-code)"}  # fmt: skip
    if json_out:
        sys.stdout.write(json.dumps(doc, indent=2, default=str) + "\n")
    else:
        _print_list(doc)


def _input_text(inp: Any) -> str:
    if not isinstance(inp, dict):
        return str(inp or "")
    text = f"{inp.get('height')}x{inp.get('width')} {inp.get('colour', '')}".strip()
    return text


def _print_list(doc: dict[str, Any]) -> None:
    from rich.table import Table

    if doc["models"]:
        t = Table(title="steering models", title_justify="left")
        for col in ("name", "kind", "input", "history", "parameters", "val RMSE°"):
            t.add_column(
                col, no_wrap=col == "name", justify="left" if col in ("name", "kind", "input") else "right"
            )
        for m in doc["models"]:
            inp = m.get("input")
            hist = inp.get("history", 0) if isinstance(inp, dict) else m.get("history", "")
            rmse = m.get("val_rmse_deg")
            params = m.get("parameters")
            t.add_row(
                m["name"],
                str(m.get("kind", "")),
                _input_text(inp) or m.get("entry_point", ""),
                str(hist),
                f"{params:,}" if isinstance(params, int) else "",
                f"{rmse:.2f}" if isinstance(rmse, (int, float)) else "",
            )
        console.print(t)
        for m in doc["models"]:
            inp = m.get("input") if isinstance(m.get("input"), dict) else {}
            parts = [
                f"card {m['card']}" if m.get("card") else "",
                inp.get("note", ""),
                f"plugin {m['entry_point']}" if m.get("entry_point") else "",
            ]
            text = "; ".join(p for p in parts if p)
            if text:
                console.print(f"  [bold]{m['name']}[/bold]: {text}", highlight=False, soft_wrap=True)
    else:
        console.print("no built-in or plugin steering models installed", highlight=False)
    k = doc["keras"]
    console.print()
    console.print("[bold]Keras .h5 files[/bold]", highlight=False)
    console.print(k["usage"], highlight=False)
    console.print(f"default preparation: {k['default_preset']}", highlight=False)
    for name, p in k["presets"].items():
        console.print(f"  preprocess={name}: {p['note']} (output {p['output']})", highlight=False)
    for name, o in k["outputs"].items():
        console.print(f"  output={name}: {o['note']}", highlight=False)
    console.print("  details of one file: lidarmt camera models PATH.h5", highlight=False)
    console.print()
    console.print(f"[bold]ONNX files[/bold]: {doc['onnx']}; details of one file: lidarmt camera models PATH.onnx",
                  highlight=False)
    console.print(f"[bold]Code[/bold]: {doc['code']}", highlight=False)


def _print_detail(doc: dict[str, Any]) -> None:
    from rich.table import Table

    t = Table.grid(padding=(0, 2))
    t.add_column(style="bold", no_wrap=True)
    t.add_column(overflow="fold")
    for key, value in doc.items():
        if key == "input":
            value = (
                f"{_input_text(value)}, history {value.get('history', 0)}"
                + (f"; {value['note']}" if value.get("note") else "")
                if isinstance(value, dict)
                else value
            )
        elif key == "layers":
            value = " → ".join(value)
        elif isinstance(value, (list, tuple)):
            value = "; ".join(str(v) for v in value) or "-"
        elif isinstance(value, int) and not isinstance(value, bool):
            value = f"{value:,}"
        t.add_row(key, str(value))
    console.print(t)
