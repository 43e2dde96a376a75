"""Command-line options that several commands declare alike (the same flag, type and help), written once.

A command writes ``backend: BackendOption = "local"``; typer reads the option from the annotation.
"""

from __future__ import annotations

from typing import Annotated

import typer

ForceBenchOption = Annotated[bool, typer.Option("--force", help="Discard an existing bench in --out and start over.")]
MixedIsaOption = Annotated[bool, typer.Option("--mixed-isa", help="Compare modules even when their verdicts come from CPUs of different ISAs (a --baseline or resumed module made on another CPU kind); refused otherwise, since floats and verdicts on a threshold differ between them.")]
ForceCampaignOption = Annotated[bool, typer.Option("--force", help="Discard an existing campaign in --out and start over.")]
ForceOutputOption = Annotated[bool, typer.Option("--force", help="Overwrite the output file if it exists (never an input).")]
QuietBarOption = Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar.")]
QuietOption = Annotated[bool, typer.Option("--quiet", "-q", help="No progress bars.")]
ResumeOption = Annotated[bool, typer.Option("--resume", help="Continue the campaign in --out from its journal.")]
RadiusOption = Annotated[float | None, typer.Option("--radius", help="Region size in metres: disk radius (default 120) or grid half-side (default 60).")]
TrialsOption = Annotated[int, typer.Option("--trials", help="Follow-ups per frame and n.")]
AddressOption = Annotated[str | None, typer.Option("--address", help="With --backend ray: the cluster's address (auto: the one 'ray start' joined this machine to); default: start Ray on this machine.")]
BackendOption = Annotated[str, typer.Option("--backend", help="local (worker processes here) or ray (--workers Ray actors, on the cluster at --address; pip install \"lidarmt[ray]\"; see docs/ray.md).")]
SensorOption = Annotated[str | None, typer.Option("--sensor", help="Sensor profile the transformations (and the simulator) model: hdl64 (default: the KITTI car's Velodyne HDL-64E), hdl32, vlp16, vls128, os1-64, or an installed plug-in's (entry points lidarmt.sensor); beams, ranges, intensity calibration and detection threshold as docs/sensors.md states them; lidarmt transforms --sensors lists them.")]
