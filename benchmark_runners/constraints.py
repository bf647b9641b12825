"""What a constraint profile changes in a measuring process, at the level the worker needs it:
the instruction-set caps and their environment variables, and the profile's slug (the part of a
device id that tells a profiled device from the device as it is). devicefit.fleet.constraints
builds the user-facing ConstraintProfile on these; the sweep and the worker use them directly,
so benchmark_runners does not import the product package."""
from __future__ import annotations

# Instruction-set caps, lowest first, with the values each library reads at load: oneDNN's
# dispatcher, ATen's kernel choice, MKL's. They take effect only in a process started with them.
ISA_CAPS = {
    "avx2": {"flag": "avx2", "env": {"ONEDNN_MAX_CPU_ISA": "AVX2", "ATEN_CPU_CAPABILITY": "avx2",
                                     "MKL_ENABLE_INSTRUCTIONS": "AVX2"}},
    "avx512": {"flag": "avx512f", "env": {"ONEDNN_MAX_CPU_ISA": "AVX512_CORE", "ATEN_CPU_CAPABILITY": "avx512",
                                          "MKL_ENABLE_INSTRUCTIONS": "AVX512"}},
}


def profile_slug(threads: int | None, isa: str | None) -> str:
    """"t1", "avx2", "t1-avx2"; "" for the device as it is. The threads part is what was asked
    for: a thread count equal to the default still names a profile (the row says what was set)."""
    return "-".join(p for p in ((f"t{threads}" if threads else ""), isa or "") if p)


def profile_env(threads: int | None, isa: str | None) -> dict[str, str]:
    """The environment a process needs to run under the profile (set before it starts)."""
    out: dict[str, str] = {}
    if threads:
        out.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    if isa:
        out.update(ISA_CAPS[isa]["env"])
    return out


def parse_profile_slug(slug: str) -> tuple[int | None, str | None]:
    """(threads, isa) of a slug profile_slug wrote; ValueError naming what is wrong otherwise
    (a landing file's device_profile is read through this before it becomes part of an id)."""
    threads, isa = None, None
    for part in slug.split("-") if slug else []:
        if part.startswith("t") and part[1:].isdigit() and int(part[1:]) > 0 and threads is None:
            threads = int(part[1:])
        elif part in ISA_CAPS and isa is None:
            isa = part
        else:
            raise ValueError(f"{slug!r} is not a constraint profile (tN threads and/or an ISA cap: {', '.join(ISA_CAPS)})")
    return threads, isa
