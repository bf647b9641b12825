"""An encoder-decoder's decode step runs all but its encoder (predict.generation.decoder_share),
counted from the cached parameter counts rather than a model built on meta in every process."""
from tests.conftest import PRINT_MODELING_MODULES, two_processes


def test_an_encoder_decoders_decoder_share_counts_the_encoder_once_and_comes_from_the_parameter_cache(tmp_path):
    """A decode step runs all but the encoder. The share was taken by building the model on meta
    in every process that predicted generation (T5's modeling module alone: 3 s of imports in
    the selection map); it is now read with the parameter counts from the derived cache."""
    code = ("from devicefit.predict.generation import decoder_share\n"
            "from models.resolve import resolve_model\n"
            "print(' '.join(f'{decoder_share(resolve_model(m)):.6f}' for m in ('t5-small', 'whisper-tiny', 'gpt2')))\n"
            + PRINT_MODELING_MODULES)
    first, second = two_processes(code, tmp_path / "cache")
    t5, whisper, gpt2 = (float(x) for x in first[0].split())
    assert first[0] == second[0] and gpt2 == 1.0
    # t5-small's encoder holds 18,881,280 of its 60,506,624 parameters (the shared embedding is
    # counted once, outside it), whisper-tiny's 8,208,384 of 37,760,640: what building the model said
    assert t5 == round(1 - 18_881_280 / 60_506_624, 6) and whisper == round(1 - 8_208_384 / 37_760_640, 6)
    assert first[1] != "[]" and second[1] == "[]"
