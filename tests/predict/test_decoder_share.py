"""An encoder-decoder's decode step runs all but its encoder (predict.generation.decoder_share),
counted from the cached parameter counts rather than a model built on meta in every process."""
import os
import subprocess
import sys


def test_an_encoder_decoders_decoder_share_counts_the_encoder_once_and_comes_from_the_parameter_cache(tmp_path):
    """A decode step runs all but the encoder. The share was taken by building the model on meta
    in every process that predicted generation (T5's modeling module alone: 3 s of imports in
    the selection map); it is now read with the parameter counts from the derived cache."""
    code = ("import sys\n"
            "from devicefit.predict.generation import decoder_share\n"
            "from models.resolve import resolve_model\n"
            "print(' '.join(f'{decoder_share(resolve_model(m)):.6f}' for m in ('t5-small', 'whisper-tiny', 'gpt2')))\n"
            "print(sorted(m for m in sys.modules if m.startswith('transformers.models.') and '.modeling_' in m and '.auto.' not in m))\n")
    env = {**os.environ, "DEVICEFIT_CACHE_DIR": str(tmp_path / "cache")}
    runs = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180, env=env) for _ in range(2)]
    for run in runs:
        assert run.returncode == 0, run.stderr[-2000:]
    first, second = (run.stdout.splitlines() for run in runs)
    t5, whisper, gpt2 = (float(x) for x in first[0].split())
    assert first[0] == second[0] and gpt2 == 1.0
    # t5-small's encoder holds 18.9M of its 60.5M parameters (the shared embedding is counted once, outside it), whisper-tiny's 8.2M of 37.8M
    assert 0.6 < t5 < 0.75 and 0.7 < whisper < 0.85
    assert first[1] != "[]" and second[1] == "[]"
