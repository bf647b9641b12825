"""Outputs, names and lists given to the selection and data commands: each bad one is refused
with the problem named, nothing is written where the user did not ask, and nothing is counted
twice (found by a fault hunt, 2026-11-29)."""
import os
import stat
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from devicefit.cli import app
from devicefit.results_io import write_json_atomic


@pytest.fixture
def data_dir(tmp_path, monkeypatch):
    data = tmp_path / "data"
    monkeypatch.setenv("DEVICEFIT_DATA_DIR", str(data))
    return data


def test_an_output_that_is_a_pipe_or_device_is_written_to_not_replaced_by_a_file(tmp_path, data_dir):
    """`map --output /dev/full` renamed the map's JSON over the device node (run as root, /dev/full
    became a regular file); a FIFO was replaced the same way. A device or a pipe is now written
    to as a stream (`--output /dev/stdout` works), and a pipe nothing reads is an error, not a hang."""
    import json
    import threading

    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    with pytest.raises(OSError, match="a pipe that no process reads"):
        write_json_atomic(fifo, {"a": 1})
    received: list[str] = []
    reader = threading.Thread(target=lambda: received.append(open(fifo).read()))
    reader.start()
    run = None
    for _ in range(100):  # until the reader has the FIFO open
        run = CliRunner().invoke(app, ["map", "--families", "embedding", "--batch-sizes", "1", "--hardware", "cpu", "--output", str(fifo)])
        if "no process reads" not in run.output:
            break
        time.sleep(0.05)
    reader.join(timeout=30)
    assert run.exit_code == 0, run.output
    assert json.loads(received[0]) and stat.S_ISFIFO(fifo.lstat().st_mode)
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
    write_json_atomic(Path(os.devnull), {"a": 1})
    assert stat.S_ISCHR(os.stat(os.devnull).st_mode)
    if os.path.exists("/dev/full"):
        with pytest.raises(OSError, match="No space left"):
            write_json_atomic(Path("/dev/full"), {"a": 1})
        assert stat.S_ISCHR(os.stat("/dev/full").st_mode)


def test_a_map_over_unknown_hardware_is_refused_not_a_map_of_empty_cells(tmp_path, data_dir):
    """`map --hardware bogus` wrote a map whose every cell was None and exited 0."""
    output = tmp_path / "map.json"
    run = CliRunner().invoke(app, ["map", "--families", "embedding", "--batch-sizes", "1", "--hardware", "cpu,bogus",
                                   "--output", str(output)])
    assert run.exit_code == 2, run.output
    assert "unknown hardware bogus" in run.output
    assert not output.exists()


@pytest.mark.parametrize("force", [False, True])
def test_export_templates_never_writes_through_a_symbolic_link(tmp_path, force):
    """A dangling link named like a template (templates/hf_vision_template.py -> elsewhere) made
    `export-templates` create the file it pointed to, outside the directory; with --force a live
    link's file was overwritten."""
    out, outside, other = tmp_path / "templates", tmp_path / "outside.txt", tmp_path / "mine.txt"
    out.mkdir()
    other.write_text("my own file\n")
    (out / "hf_vision_template.py").symlink_to(outside)
    (out / "hf_audio_template.py").symlink_to(other)
    run = CliRunner().invoke(app, ["export-templates", str(out), *(["--force"] if force else [])])
    assert run.exit_code == 2, run.output
    assert "symbolic links named hf_audio_template.py, hf_vision_template.py" in run.output
    assert not outside.exists() and other.read_text() == "my own file\n"
    assert sorted(p.name for p in out.iterdir()) == ["hf_audio_template.py", "hf_vision_template.py"]


def test_export_templates_again_says_what_it_wrote_and_leaves_devicefits_own_files_alone(tmp_path):
    """A second export said "wrote" for every template, unchanged ones included, and rewrote them."""
    out = tmp_path / "templates"
    first = CliRunner().invoke(app, ["export-templates", str(out)])
    assert first.exit_code == 0 and first.output.count("wrote ") == len(list(out.iterdir())) > 1
    edited = out / "hf_vision_template.py"
    edited.write_text("# my own\n")
    stamps = {p.name: p.stat().st_mtime_ns for p in out.iterdir()}
    again = CliRunner().invoke(app, ["export-templates", str(out), "--force"])
    assert again.exit_code == 0 and again.output.replace("\n", "").count("wrote ") == 1 and "hf_vision_template.py" in again.output
    assert {p.name: p.stat().st_mtime_ns for p in out.iterdir() if p.name != edited.name} == \
        {k: v for k, v in stamps.items() if k != edited.name}
    third = CliRunner().invoke(app, ["export-templates", str(out)])
    assert third.exit_code == 0 and "wrote" not in third.output and "unchanged: nothing written" in third.output.replace("\n", "")


def test_export_templates_to_an_empty_name_is_refused_not_the_current_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run = CliRunner().invoke(app, ["export-templates", ""])
    assert run.exit_code == 2, run.output
    assert "is empty" in run.output
    assert list(tmp_path.iterdir()) == []


def test_devices_list_of_an_unknown_kind_is_refused_not_no_registered_devices(data_dir):
    """`devices list --kind bogus` (or `CPU`) said "no registered devices" with exit 0 while
    devices were registered."""
    from devicefit import store

    with store.opened(data_dir / "devicefit.duckdb") as con:
        store.migrate(con)
        store.register_device(con, {"id": "cpu-0123456789ab", "kind": "cpu", "name": "CPU", "hostname": "h", "host_fingerprint": None,
                                    "hardware_fingerprint": "cpu-0123456789ab", "profile": {}, "details": None, "probe": None})
    for kind in ("bogus", "CPU", ""):
        run = CliRunner().invoke(app, ["devices", "list", "--kind", kind])
        assert run.exit_code == 2, run.output
        assert "unknown hardware kind" in run.output and "known: cpu" in run.output
    run = CliRunner().invoke(app, ["devices", "list", "--kind", "cuda"])
    assert run.exit_code == 0 and "no registered cuda devices" in run.output, run.output
    assert "cpu-0123456789ab" in CliRunner().invoke(app, ["devices", "list", "--kind", "cpu"]).output


def test_one_model_directory_is_registered_under_one_name(tmp_path, data_dir):
    """`models add DIR --name other` after `models add DIR` registered the same directory twice:
    two models to the store, whose rows are keyed by name."""
    import json

    from models.catalog import load_catalog

    directory = tmp_path / "mytiny"
    directory.mkdir()
    (directory / "config.json").write_text(json.dumps(load_catalog()["bert-tiny"].config))
    assert CliRunner().invoke(app, ["models", "add", str(directory)]).exit_code == 0
    assert CliRunner().invoke(app, ["models", "add", f"{directory}/"]).exit_code == 0  # the same again: a no-op
    for name in ("other", "org/x"):
        run = CliRunner().invoke(app, ["models", "add", str(directory), "--name", name])
        assert run.exit_code == 2, run.output
        assert "is already registered as 'mytiny'" in run.output
    assert list(json.loads((data_dir / "models.json").read_text())["models"]) == ["mytiny"]
    assert CliRunner().invoke(app, ["models", "remove", "mytiny"]).exit_code == 0
    assert CliRunner().invoke(app, ["models", "add", str(directory), "--name", "other"]).exit_code == 0


def test_resources_counts_a_model_named_twice_once(data_dir):
    """`resources gpt2 GPT2 openai-community/gpt2` gave three entries of one model and three
    times its memory as the pool's total (which decides low-memory mode)."""
    import json

    run = CliRunner().invoke(app, ["resources", "bert-tiny", "BERT-TINY", "prajjwal1/bert-tiny"])
    assert run.exit_code == 2, run.output
    assert "named more than once: bert-tiny, BERT-TINY, prajjwal1/bert-tiny are all bert-tiny" in run.output
    once = json.loads(CliRunner().invoke(app, ["resources", "bert-tiny"]).output)
    again = json.loads(CliRunner().invoke(app, ["resources", "bert-tiny", "bert-tiny"]).output)
    assert again["resource_requirements"]["total_memory_mb"] == once["resource_requirements"]["total_memory_mb"]


@pytest.mark.parametrize("args, message", [
    (["--task", "training", "--mode", "generation"], "--task training selects on training figures, not --mode generation"),
    (["--task", "generation", "--scenario", "inference"], "--task generation selects on generation figures, not --mode inference"),
    (["--distributed", "--gpu-count", "8"], "--distributed plans training across --gpu-count GPUs; this selection is on inference"),
    (["--task", "generation", "--distributed"], "this selection is on generation figures"),
])
def test_select_refuses_a_mode_it_would_not_use(data_dir, args, message):
    """`select --task training --mode generation` answered on training figures, and `--distributed`
    outside training was ignored, both with exit 0 and nothing said."""
    run = CliRunner().invoke(app, ["select", "--model", "gpt2", *args])
    assert run.exit_code == 2, run.output
    assert message in " ".join(run.output.split())
