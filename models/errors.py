"""The one base of devicefit's errors, at the bottom layer so every package can raise it.

A DevicefitError is a condition a user can act on (an unknown model, a missing predictor, a bad
value), said in words. Each subclass says how the two surfaces answer it: `exit_code` for the
CLI (handled once, in devicefit.cli.common.DevicefitGroup) and `http_status` for the API
(handled once, in devicefit.api.app). Anything else that escapes is a bug: a traceback on the
CLI, a logged 500 on the API."""
from __future__ import annotations

import errno


class DevicefitError(Exception):
    exit_code: int = 2  # a usage or input problem, as click uses 2
    http_status: int = 400

    def public_message(self) -> str:
        """What an API client is told (the CLI prints str(self)): never more than the user may see."""
        return str(self)


class Interrupted(DevicefitError):
    """The process was asked to stop (SIGINT, SIGTERM): raised out of whatever it was doing, and
    never counted as one task's failure by code that carries on past failures (a cache warm-up
    that treats a failed task as the caller's to meet later would otherwise go on with the next)."""

    exit_code = 130  # the shell's 128 + SIGINT; a subclass that knows the signal says its own


def is_disk_full(exc: BaseException | None) -> bool:
    """Whether `exc`, or an error it was raised from, is the disk being full (or a quota spent).
    DuckDB and the converters written in C++ (onnx's protobuf writer) say it only in words."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        text = str(exc).lower()
        if (isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)) or "no space left on device" in text \
                or "disk quota exceeded" in text:
            return True
        exc = exc.__cause__ or exc.__context__
    return False
