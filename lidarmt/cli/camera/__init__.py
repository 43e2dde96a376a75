"""``lidarmt camera ...``: the camera half's commands, one module per command, found in this package.

Each module has ``register(app)``; modules are imported at start-up, so heavy dependencies (torch, cv2, h5py)
are imported inside the command functions.
"""

from __future__ import annotations

import importlib
import pkgutil

import typer

camera_app = typer.Typer(
    name="camera",
    help=(
        "Metamorphic testing of camera steering models (DeepTest, DeepRoad, TACTIC).\n\n"
        "Image sources: a Udacity-style folder (center/*.jpg + a CSV frame_id,steering_angle), a folder of "
        "images, or a camera topic in a ROS1/ROS2 bag or Cyber record.\n\n"
        "Typical session:\n\n"
        "  lidarmt camera info ../shared/data/udacity\n\n"
        "  lidarmt camera models\n\n"
        "  lidarmt camera fuzz --images ../shared/data/udacity --model dave-orig,epoch --transforms simple"
    ),
    no_args_is_help=True,
    rich_markup_mode="markdown",
)


def register(app: typer.Typer) -> None:
    for mod in sorted(m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_")):
        importlib.import_module(f"{__name__}.{mod}").register(camera_app)
    app.add_typer(camera_app, name="camera")
