"""Where this process's cgroup directories are, for the limits a container sets on it: its CPU
quota (hardware/cpu_budget.py) and its memory limit (hardware/memory_budget.py).

/proc/self/cgroup names the process's group in each hierarchy (v1: one per controller set;
v2: the unified one, line "0::"), and /proc/self/mountinfo where each hierarchy is mounted and
which part of it the mount shows (its root field: a container sees its own group at the mount).
A limit set on any ancestor applies too, so callers read every directory from the group up to
the mount and keep the tightest. Linux only; elsewhere (no /proc) there are no directories.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class GroupDir:
    path: Path  # a directory of this process's group or of an ancestor
    version: int  # 1 or 2
    top: Path  # the hierarchy's mount point
    controllers: frozenset[str]  # v1: the controllers the hierarchy holds; v2: empty


def read_text(path: Path) -> str | None:
    """The file's text, stripped; None where it cannot be read. Bytes that are not UTF-8 (a
    mount point's name in mountinfo) are kept as surrogates, not an error."""
    try:
        return path.read_text(errors="surrogateescape").strip()
    except OSError:
        return None


def _mounts(proc: Path) -> list[tuple[str, str, str, set[str]]]:
    """(root, mount point, fstype, super options) of every cgroup hierarchy in mountinfo."""
    text = read_text(proc / "self" / "mountinfo")
    out = []
    for line in (text or "").splitlines():
        head, sep, tail = line.partition(" - ")
        fields, rest = head.split(), tail.split()
        if not sep or len(fields) < 5 or len(rest) < 3 or rest[0] not in ("cgroup", "cgroup2"):
            continue
        out.append((_unescape(fields[3]), _unescape(fields[4]), rest[0], set(rest[2].split(","))))
    return out


def _unescape(field: str) -> str:
    """mountinfo writes a space, tab, newline or backslash in a path as an octal escape (\\040)."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def _memberships(proc: Path) -> dict[str, str]:
    """controller -> cgroup path, from /proc/self/cgroup; "" is the v2 hierarchy's."""
    out: dict[str, str] = {}
    for line in (read_text(proc / "self" / "cgroup") or "").splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        for controller in parts[1].split(",") if parts[1] else [""]:
            out[controller] = parts[2]
    return out


def _walk(top: Path, mount_root: str, path: str) -> list[Path]:
    """The directories of `path` in a hierarchy mounted at `top` (showing `mount_root` of it),
    deepest first, up to the mount point; none where the path is outside what it shows."""
    mount_root = mount_root.rstrip("/")
    if path != mount_root and not path.startswith(mount_root + "/"):
        return []
    rel = [p for p in path[len(mount_root):].split("/") if p]
    if ".." in rel or "." in rel:  # a group outside this cgroup namespace's root: not under the mount
        return []
    return [top.joinpath(*rel[:i]) for i in range(len(rel), -1, -1)]


def group_dirs(controller: str, proc: Path = Path("/proc"), root: Path = Path("/")) -> list[GroupDir]:
    """Every directory of this process's group and its ancestors in the hierarchies where
    `controller`'s files can be (the v2 one, and the v1 one holding the controller), deepest
    first within each. `proc` and `root` stand in for the machine's own in tests."""
    memberships = _memberships(proc)
    out: list[GroupDir] = []
    for mount_root, mount_point, fstype, options in _mounts(proc):
        top = root / mount_point.lstrip("/")
        if fstype == "cgroup2" and "" in memberships:
            out += [GroupDir(d, 2, top, frozenset()) for d in _walk(top, mount_root, memberships[""])]
        elif fstype == "cgroup" and controller in options and controller in memberships:
            out += [GroupDir(d, 1, top, frozenset(options)) for d in _walk(top, mount_root, memberships[controller])]
    return out


def same_group_in(controller: str, directory: GroupDir, proc: Path = Path("/proc"), root: Path = Path("/")) -> Path | None:
    """For a v1 directory, the directory of the same group in the hierarchy holding
    `controller` (beside it where they share one); None where this process is in a different
    group there, or it is not mounted."""
    if controller in directory.controllers:
        return directory.path
    memberships = _memberships(proc)
    mine = next((c for c in directory.controllers if c in memberships), None)
    if mine is None or memberships.get(controller) != memberships[mine]:
        return None
    rel = directory.path.relative_to(directory.top)
    for d in group_dirs(controller, proc, root):
        if d.version == 1 and d.path.relative_to(d.top) == rel:
            return d.path
    return None
