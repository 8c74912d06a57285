"""What the per-op refit already explains: a run is calibrated against its command predicted with the refitted ops.

When `llmperf refine` refits per-op models from a run's --profile-ops samples (refine/op_refit.py), the prediction
saved at launch still carries the op errors the refit just corrected. Calibrating on measured / launch prediction
would count them twice: once in the refitted ops every later prediction uses, and again in the end-to-end factor
(this configuration's own and the shared part other configurations get). So the run's command (prediction.json
"command", the argv `llmperf run` predicted) is predicted again, in this process and environment (the job has
just ended: its config files are where they were), with the refitted profile and without any calibration; the
calibration compares the measured step with that. The ratio launch / refitted is what the op refit explains.
Runs ingested before keep the predictions of their own launch: their commands' files may be gone, and those
runs were not the ones whose ops were sampled.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Mapping


@dataclass(frozen=True)
class Rebased:
    """The run's uncalibrated prediction with the refitted ops, or why there is none."""

    uncalibrated_s: float | None
    """The command predicted again, uncalibrated; None when it could not be."""
    reason: str = ""
    """Why not (for the note), '' when it was."""


def repredict_uncalibrated(prediction: Mapping[str, Any] | None, cluster: str) -> Rebased:
    """The saved command predicted again on `cluster`, the calibration in force undone (api.predict_config scales
    the step by calibration_scale). Never raises: a command that no longer resolves keeps the launch prediction."""
    command = (prediction or {}).get("command")
    if not isinstance(command, list) or not command or not all(isinstance(a, str) for a in command):
        return Rebased(None, "prediction.json saved no command to predict again")
    try:
        from llmperf_hook.api import predict_command

        estimate = predict_command(command, os.environ, cluster=cluster).estimate
    except Exception as err:  # noqa: BLE001 - refine goes on with the launch prediction, and says why
        return Rebased(None, f"its command did not predict again ({type(err).__name__}: {str(err)[:160]})")
    scale = estimate.calibration_scale or 1.0
    value = estimate.step_time_s / scale
    return Rebased(value if value > 0 else None, "" if value > 0 else "the refitted prediction was not positive")


def describe(launch_s: float, rebased: Rebased) -> str:
    """The note refine prints after an op refit."""
    if rebased.uncalibrated_s is None:
        return ("the calibration compares measured steps with the prediction made at launch, before this op refit "
                f"({rebased.reason}): an op error the refit corrected is also in the calibration's ratios")
    return (f"the op refit explains x{launch_s / rebased.uncalibrated_s:.3f} of the launch prediction "
            f"({launch_s * 1e3:.2f} -> {rebased.uncalibrated_s * 1e3:.2f} ms with the refitted ops): the calibration "
            f"compares the measured steps with the refitted prediction, so that error is not counted twice "
            f"(refine/op_rebase.py; runs ingested before keep their launch predictions)")
