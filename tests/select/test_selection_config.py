"""The selection configuration (devicefit/select/config.py): every wrong value is refused with
its dotted path and what was expected, before any selection runs."""
import json

import pytest

from devicefit.select.config import SelectionConfigError, load_config


def test_config_errors_name_the_field(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"selection_criteria": {"inference": {"latency_weight": "high"}}}))
    with pytest.raises(SelectionConfigError, match=r"selection_criteria\.inference\.latency_weight must be a number, got 'high'"):
        load_config(bad)
    bad.write_text(json.dumps({"model_size_categories": {"small": 5, "medium": 2, "large": 9}}))
    with pytest.raises(SelectionConfigError, match="ascend"):
        load_config(bad)
    bad.write_text("{not json")
    with pytest.raises(SelectionConfigError, match="not valid JSON"):
        load_config(bad)
    with pytest.raises(SelectionConfigError, match="does not exist"):
        load_config(tmp_path / "missing.json")


@pytest.mark.parametrize("section, words", [
    ({"hardware_preferences": {"cdua": {"cost_factor": 0.5}}}, r"hardware_preferences\.cdua: not a known device kind \(did you mean cuda\?\)"),
    ({"model_families": {"visoin": {"batch_size_importance": "high"}}}, r"model_families\.visoin: not a known family \(did you mean vision\?\)"),
])
def test_a_misspelt_device_kind_or_family_in_a_config_is_refused(tmp_path, section, words):
    """A preference under a name selection never asks for (a typo) was accepted and weighed
    nothing, so the file seemed to work and changed no answer."""
    bad = tmp_path / "typo.json"
    bad.write_text(json.dumps(section))
    with pytest.raises(SelectionConfigError, match=words):
        load_config(bad)


@pytest.mark.parametrize("text, field", [
    ('{"selection_criteria": {"inference": {"latency_weight": NaN, "throughput_weight": 0.3}}}', r"selection_criteria\.inference\.latency_weight"),
    ('{"selection_criteria": {"training": {"throughput_weight": Infinity}}}', r"selection_criteria\.training\.throughput_weight"),
    ('{"hardware_preferences": {"cpu": {"cost_factor": NaN}}}', r"hardware_preferences\.cpu\.cost_factor"),
])
def test_a_config_weight_of_nan_or_infinity_is_refused(tmp_path, text, field):
    """Python's json reads NaN and Infinity; a NaN weight or factor passed every range check and
    made the scores NaN, so the CLI recommended a hardware with 'score nan' (found by a fault hunt)."""
    bad = tmp_path / "nan.json"
    bad.write_text(text)
    with pytest.raises(SelectionConfigError, match=field + " must be a finite number"):
        load_config(bad)


def test_a_config_file_that_is_not_text_is_named(tmp_path):
    bad = tmp_path / "binary.json"
    bad.write_bytes(b"\xff\xfe{}")
    with pytest.raises(SelectionConfigError, match=f"{bad} is not valid JSON"):
        load_config(bad)


def test_a_config_number_beyond_a_float_is_refused_not_a_traceback(tmp_path):
    """JSON reads a 400-digit number as an integer, which math.isfinite cannot take (OverflowError)."""
    bad = tmp_path / "huge.json"
    bad.write_text('{"selection_criteria": {"inference": {"latency_weight": 1' + "0" * 400 + '}}}')
    with pytest.raises(SelectionConfigError, match=r"latency_weight must be a finite number, got an integer of 1329 bits"):
        load_config(bad)


def test_a_config_nested_past_the_json_decoder_is_named_not_a_traceback(tmp_path):
    """json.loads raises RecursionError for it: `devicefit select --config` ended in that traceback."""
    bad = tmp_path / "deep.json"
    bad.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(SelectionConfigError, match=f"{bad} is not valid JSON: nested too deeply"):
        load_config(bad)
