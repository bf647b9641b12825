"""Fixtures of the fault tests: a real full disk (a small tmpfs)."""
import os
import shutil
import subprocess

import pytest


def _mount_small_disk(path, size: str = "2m") -> str | None:
    """Mount a tmpfs of `size` (2 MiB) at `path`; the reason it cannot be done, or None."""
    if os.geteuid() != 0:
        return "mounting a small tmpfs needs root"
    if shutil.which("mount") is None or shutil.which("umount") is None:
        return "no mount/umount binaries on this machine"
    out = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True, text=True)
    return f"mount -t tmpfs failed: {(out.stderr or out.stdout).strip()}" if out.returncode else None


@pytest.fixture
def small_disk(tmp_path):
    disk = tmp_path / "disk"
    disk.mkdir()
    reason = _mount_small_disk(disk)
    if reason:
        pytest.skip(reason)
    try:
        yield disk
    finally:
        subprocess.run(["umount", str(disk)], capture_output=True)
        if os.path.ismount(disk):
            subprocess.run(["umount", "-l", str(disk)], capture_output=True)
