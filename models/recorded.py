"""The model a stored measurement row measured, for learning from it (training, the TTFT check,
the decode calibration).

A row's `model_path` was written on the machine that measured it: a path there, not here. It
is used as follows:
- a config this project ships (a path through `benchmarks/configs/`, as the datasets' rows of
  the 4-layer Mixtrals record it from whichever checkout measured them) is read from this
  checkout's `benchmarks/configs/`, so such rows count in any clone and on any machine;
- any other recorded path (a local model directory or config file) is read where it is here,
  and used only if the model there is the one the row measured: its parameter count and
  architecture, where the row records them, must agree. A path that names another model here
  (a different file at the same place, a config edited since) is a ValueError, not a
  silently wrong learning row.
A row without a path is resolved by its name as a name (catalog, registry, aliases), never as a
path on this machine. Nothing is executed either way: local models are read from their config,
with transformers' own classes only.
"""
from __future__ import annotations

from pathlib import Path, PurePosixPath
from typing import Any, Mapping

from models.aliases import alias_names
from models.catalog import ModelSpec, UnknownModelError, close_names
from models.resolve import model_at_path, model_by_name

SHIPPED_CONFIGS = Path(__file__).resolve().parents[1] / "benchmarks" / "configs"
_SHIPPED_PARTS = ("benchmarks", "configs")


def shipped_config(recorded: str) -> Path | None:
    """This checkout's file for a recorded path through benchmarks/configs/, if it has one."""
    parts = PurePosixPath(recorded.replace("\\", "/")).parts
    for i in range(len(parts) - 2, -1, -1):
        if parts[i:i + 2] == _SHIPPED_PARTS:
            rest = parts[i + 2:]
            if rest and ".." not in rest:
                candidate = SHIPPED_CONFIGS.joinpath(*rest)
                return candidate if candidate.is_file() else None
    return None


def _load_path(path: Path) -> ModelSpec:
    try:
        spec = model_at_path(str(path))
    except (OSError, ValueError) as exc:
        raise ValueError(f"recorded model path {path}: {exc}") from exc
    if spec is None:
        raise FileNotFoundError(f"recorded model path {path} is not a model directory or config file on this machine")
    return spec


class RecordedModelMismatch(ValueError):
    """A recorded path whose model here is not the one the row measured."""


def _check_facts(spec: ModelSpec, row: Mapping[str, Any], where: str) -> None:
    from models.analysis import parameter_count

    recorded_arch, recorded_params = row.get("architecture"), row.get("parameters")
    if recorded_arch and recorded_arch != spec.architecture:
        raise RecordedModelMismatch(f"{where} holds a {spec.architecture} here; the row measured a {recorded_arch}")
    if recorded_params and int(recorded_params) != (here := parameter_count(spec)):
        raise RecordedModelMismatch(f"{where} holds {here:,} parameters here; the row measured {int(recorded_params):,}")


def resolve_recorded_model(row: Mapping[str, Any]) -> ModelSpec:
    """The spec of the model `row` (a stored measurement: `model`, optionally `model_path`,
    `parameters`, `architecture`) measured. UnknownModelError for a name nothing here knows,
    FileNotFoundError for a recorded path with no model here, RecordedModelMismatch (a
    ValueError) for one whose model here is not the row's."""
    path = row.get("model_path")
    if path:
        shipped = shipped_config(str(path))
        spec = _load_path(shipped or Path(str(path)))
        _check_facts(spec, row, str(shipped or path))
        return spec
    name = str(row.get("model") or "").strip()
    spec = model_by_name(name) if name else None
    if spec is None:
        raise UnknownModelError(name, close_names(name, alias_names()))
    return spec
