"""Hostile and odd model names and model directories (fault hunt A): each case was a defect
reproduced from the CLI or the API before its fix."""
import json
import os
import shutil
import subprocess
import sys


def test_serve_model_dir_under_a_path_with_a_colon_reaches_the_server_whole(tmp_path, tiny_models, monkeypatch):
    """`serve --model-dir /data/run:2/tiny-bert` was checked, then handed to the server joined
    with ':' and split back into '/data/run' and '2/tiny-bert': the server refused to start
    ('--model-dir is not a directory'), or served another directory where '/data/run' was one."""
    import uvicorn
    from typer.testing import CliRunner

    from devicefit.cli import app

    directory = tmp_path / "run:2" / "tiny-bert"
    shutil.copytree(tiny_models["text"], directory)
    for key in ("DEVICEFIT_MODEL_DIRS", "DEVICEFIT_DATA_DIR", "DEVICEFIT_WARM_UP", "DEBUG", "API_CACHE_SIZE", "BENCHMARK_DIR"):
        monkeypatch.setenv(key, os.environ.get(key, ""))
    monkeypatch.delenv("BENCHMARK_DIR")
    monkeypatch.setattr(uvicorn, "run", lambda *a, **k: None)
    out = CliRunner().invoke(app, ["serve", "--no-warm-up", "--benchmark-dir", str(tmp_path / "data"), "--model-dir", str(directory)])
    assert out.exit_code == 0, out.output
    probe = ("import json, devicefit.api.app as a\n"
             "a.create_app = lambda s: print(json.dumps([str(d) for d in s.model_dirs]))\n"
             "import devicefit.api.main\n")
    read = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300, env=dict(os.environ))
    assert read.returncode == 0, read.stderr[-2000:]
    assert json.loads(read.stdout.strip().splitlines()[-1]) == [str(directory.resolve())]


def _local_row(path: str | None, parameters: int, run_id: str, model: str = "checkpoint-500", source: str = "local") -> dict:
    from benchmark_runners.records import BenchmarkConfig, BenchmarkResult

    samples = [10.0, 10.1, 9.9] * 4
    cfg = BenchmarkConfig(model, device="cpu", backend="torch", precision="fp32", batch_size=1)
    return BenchmarkResult.for_config(
        cfg, run_id, "2026-11-22T00:00:00+00:00", "ok", None, samples_ms=samples, p50_ms=10.0, mean_ms=10.0,
        iterations=len(samples), throughput_samples_per_s=1000 * len(samples) / sum(samples), ci_rel_half_width=0.01,
        ci_target=0.02, family="embedding", parameters=parameters, model_source=source, model_path=path,
        input={"dims": {"seq_length": 128}}, environment={"hostname": "h"}).to_json()


def test_two_local_models_of_one_name_are_never_stored_as_one(tmp_path):
    """`runs/v1/checkpoint-500` and `runs/v2/checkpoint-500` (4.4M and 10.1M parameters) were
    stored as one model 'checkpoint-500': their medians merged, and the models table kept the
    last parameter count for both."""
    import pytest

    from devicefit import store
    from devicefit.landing_schema import LandingFileError
    from devicefit.results_io import results_document
    from devicefit.store.model_identity import name_clash

    def doc(*rows):
        return {**results_document("r1", [], {}), "results": list(rows)}

    con = store.connect(tmp_path / "db.duckdb")
    store.migrate(con)
    store.replace_source(con, "ingest:v1", "ingest", doc(_local_row("/runs/v1/checkpoint-500", 4385920, "r1")))
    with pytest.raises(LandingFileError, match="another model named 'checkpoint-500'"):
        store.replace_source(con, "ingest:v2", "ingest", doc(_local_row("/runs/v2/checkpoint-500", 10119936, "r2")))
    with pytest.raises(LandingFileError, match="two models are named 'checkpoint-500'"):
        store.replace_source(con, "ingest:both", "ingest", doc(_local_row("/a/checkpoint-500", 1000, "r3"),
                                                              _local_row("/b/checkpoint-500", 2000, "r4")))
    # the same model again (another run, another machine's path) is welcome; nothing stored was lost
    store.replace_source(con, "ingest:v1-again", "ingest", doc(_local_row("/elsewhere/checkpoint-500", 4385920, "r5")))
    assert con.execute("SELECT count(*), count(DISTINCT parameters) FROM measurements").fetchone() == (2, 1)
    # a local model under a catalog model's name (a file from before such directories were renamed), and the reverse
    store.replace_source(con, "ingest:catalog", "ingest", doc(_local_row(None, 4385920, "r6", "bert-tiny", "catalog")))
    with pytest.raises(LandingFileError, match="another model named 'bert-tiny' \\(the catalog model\\)"):
        store.replace_source(con, "ingest:fake", "ingest", doc(_local_row("/x/bert-tiny", 4385920, "r7", "bert-tiny")))
    # a catalog model owns its name: its rows are never refused for local rows stored under it
    store.replace_source(con, "ingest:old", "ingest", doc(_local_row("/x/orphan", 1000, "r10", "orphan")))
    store.replace_source(con, "ingest:cat", "ingest", doc(_local_row(None, 4385920, "r8", "orphan", "catalog")))
    store.replace_source(con, "ingest:catalog-again", "ingest", doc(_local_row(None, 4386000, "r9", "bert-tiny", "catalog")))
    con.close()
    assert "another model named 'checkpoint-500'" in name_clash(tmp_path / "db.duckdb", "checkpoint-500", 10119936, None)
    assert name_clash(tmp_path / "db.duckdb", "checkpoint-500", 4385920, None) is None


def test_benchmark_refuses_two_directories_of_one_name_before_measuring(tmp_path, tiny_models):
    from typer.testing import CliRunner

    from devicefit.cli import app

    for run in ("v1", "v2"):
        shutil.copytree(tiny_models["text" if run == "v1" else "image"], tmp_path / run / "checkpoint-500")
    out = CliRunner().invoke(app, ["benchmark", "--model", f"{tmp_path / 'v1' / 'checkpoint-500'},{tmp_path / 'v2' / 'checkpoint-500'}",
                                   "--batch-sizes", "1", "--timing", "quick"])
    assert out.exit_code != 0 and "two models are named 'checkpoint-500'" in " ".join(out.output.split()), out.output
    assert "configs on" not in out.output  # refused before any run started


def test_generated_tests_of_two_models_sharing_a_file_stem_never_replace_each_other(tmp_path, tiny_models):
    """File names keep [A-Za-z0-9_] only: `my.model` and `my-model` both became
    test_hf_my_model.py, and the second generation silently replaced the first model's test
    (and a user's own file of that name)."""
    import ast

    from devicefit.testgen import generate_test

    def _generated_for(path):
        return next(n.value.value for n in ast.parse(path.read_text()).body
                    if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", None) == "MODEL")

    a, b = tmp_path / "my.model", tmp_path / "my-model"
    shutil.copytree(tiny_models["text"], a)
    shutil.copytree(tiny_models["text"], b)
    out = tmp_path / "generated"
    first = generate_test(str(a), out, validate=False).path
    second = generate_test(str(b), out, validate=False).path
    assert first != second
    assert _generated_for(first) == str(a.resolve()) and _generated_for(second) == str(b.resolve())
    assert generate_test(str(a), out, validate=False).path == first  # regenerating keeps each model's file
    assert generate_test(str(b), out, validate=False).path == second
    own = out / "test_hf_bert_tiny.py"
    own.write_text("# the user's own test\n")
    assert generate_test("bert-tiny", out, validate=False).path != own
    assert own.read_text() == "# the user's own test\n"


def test_generate_tests_validates_each_directory_of_one_name_with_its_own_build(tmp_path, tiny_models):
    """Validation pooled builds by (family, name, device): the second of two directories called
    checkpoint-500 was run as the first's pooled model (a hit), so its check was the other model's."""
    from devicefit.resource_pool import ResourcePool
    from devicefit.testgen import generate_test

    pool = ResourcePool()
    import devicefit.resource_pool as rp

    original = rp.get_global_resource_pool
    rp.get_global_resource_pool = lambda: pool
    try:
        shutil.copytree(tiny_models["text"], tmp_path / "v1" / "checkpoint-500")
        shutil.copytree(tiny_models["text"], tmp_path / "v2" / "checkpoint-500")
        config = tmp_path / "v2" / "checkpoint-500" / "config.json"
        config.write_text(json.dumps({**json.loads(config.read_text()), "vocab_size": 500}))
        for weights in (tmp_path / "v2" / "checkpoint-500").glob("model*.safetensors*"):
            weights.unlink()
        shapes = [generate_test(str(tmp_path / v / "checkpoint-500"), tmp_path / "out", device="cpu").validation
                  for v in ("v1", "v2")]
    finally:
        rp.get_global_resource_pool = original
    assert pool.stats()["hits"] == 0 and pool.stats()["misses"] == 2
    assert shapes[0]["first_output_shape"] != shapes[1]["first_output_shape"]


def test_a_config_without_architectures_takes_its_model_types_base_class(tmp_path, tiny_models):
    """README: without `architectures`, the base model class for `model_type`. Every command
    (models add, predict, classify, benchmark) crashed instead with transformers 5's
    `TypeError: _LazyAutoMapping.get() missing 1 required positional argument: 'default'`."""
    from models.catalog import load_local_model

    directory = tmp_path / "no-architectures"
    shutil.copytree(tiny_models["text"], directory)
    config = json.loads((directory / "config.json").read_text())
    config.pop("architectures", None)
    (directory / "config.json").write_text(json.dumps(config))
    assert load_local_model(directory).architecture == "BertModel"
    config["architectures"] = []
    (directory / "config.json").write_text(json.dumps(config))
    assert load_local_model(directory).architecture == "BertModel"


def test_a_config_with_no_token_positions_is_refused_by_name(tmp_path, tiny_models):
    """`max_position_embeddings: 0` passed `models add` (the limits only cap sizes), then every
    trace died inside torch: predict's traceback was 'The expanded size of the tensor (128)
    must match the existing size (0)'."""
    import pytest

    from models.catalog import InvalidModelError, load_local_model

    directory = tmp_path / "no-positions"
    shutil.copytree(tiny_models["text"], directory)
    config = json.loads((directory / "config.json").read_text())
    for value in (0, 1) if config.get("model_type") == "roberta" else (0,):
        (directory / "config.json").write_text(json.dumps({**config, "max_position_embeddings": value}))
        with pytest.raises(InvalidModelError, match="max_position_embeddings = 0 leaves the model no token positions"):
            load_local_model(directory)
    (directory / "config.json").write_text(json.dumps(config))
    assert load_local_model(directory).name == "no-positions"


def test_a_config_that_builds_but_cannot_run_its_own_inputs_is_an_invalid_model(tmp_path):
    """An image smaller than the first kernel (efficientnet at image_size 7), 0 input channels:
    within the limits and buildable, so predict, analyze and select died with torch's
    'Calculated padded input size per channel ... Kernel size can't be greater' traceback and
    the API answered 500. Now an InvalidModelError (422) naming the directory."""
    import pytest

    from devicefit.predict.features import model_point
    from models.analysis import forward_flops
    from models.catalog import InvalidModelError, load_catalog
    from models.inputs import input_signature
    from models.resolve import resolve_model

    catalog = load_catalog()
    for name, key, value in (("efficientnet-b0", "image_size", 7), ("resnet-18", "num_channels", 0)):
        directory = tmp_path / f"{name}-{key}"
        directory.mkdir()
        (directory / "config.json").write_text(json.dumps({**catalog[name].config, key: value,
                                                           "architectures": [catalog[name].architecture]}))
        spec = resolve_model(str(directory))
        with pytest.raises(InvalidModelError, match="transformers cannot run .* on the inputs this config describes"):
            model_point(spec)
        with pytest.raises(InvalidModelError, match="cannot run"):
            forward_flops(spec, input_signature(spec, 1))


def test_generate_tests_never_writes_through_a_symbolic_link(tmp_path):
    """A (dangling) link named test_hf_bert_tiny.py in the output directory had its target,
    wherever it pointed, created and filled with the generated test (export-templates refuses
    links; generate-tests wrote through them)."""
    from devicefit.testgen import generate_test

    out = tmp_path / "generated"
    out.mkdir()
    target = tmp_path / "elsewhere" / "planted.py"
    target.parent.mkdir()
    (out / "test_hf_bert_tiny.py").symlink_to(target)
    path = generate_test("bert-tiny", out, validate=False).path
    assert not target.exists()
    assert path.parent == out and not path.is_symlink() and "bert-tiny" in path.read_text()


def test_a_fault_of_devicefits_own_tracing_or_of_memory_is_never_blamed_on_the_config(tmp_path):
    """local_forward said "transformers cannot run X on the inputs this config describes" (a
    422) for any exception inside it: a bug in the operator tracer's dispatch, or a MemoryError,
    told the user to fix a config that was fine (found by review, 2026-11-30)."""
    import pytest

    from models import op_tracer
    from models.catalog import load_catalog
    from models.loading import local_forward
    from models.resolve import resolve_model

    catalog = load_catalog()
    directory = tmp_path / "bert-ok"
    directory.mkdir()
    (directory / "config.json").write_text(json.dumps({**catalog["bert-tiny"].config, "architectures": [catalog["bert-tiny"].architecture]}))
    spec = resolve_model(str(directory))
    with pytest.raises(MemoryError):
        with local_forward(spec):
            raise MemoryError()

    def broken(*_args, **_kwargs):  # a bug in devicefit's own code, raised from its module's frame
        raise KeyError("tracer bug")

    broken.__code__ = broken.__code__.replace(co_filename=op_tracer.__file__)
    with pytest.raises(KeyError, match="tracer bug"):
        with local_forward(spec):
            broken()


def test_a_partition_that_replaces_an_older_one_is_not_refused_for_the_model_it_replaces(tmp_path):
    """A device partition of local model X with a new parameter count supersedes the kind-level
    partition holding the old one: refused for that partition's rows, which it removes (found
    by review, 2026-11-30)."""
    import pytest

    from benchmark_runners.records import BenchmarkResult
    from devicefit import store
    from devicefit.landing_schema import LandingFileError
    from devicefit.results_io import results_document
    from devicefit.store.model_identity import check_one_model_per_name

    con = store.connect(tmp_path / "db.duckdb")
    store.migrate(con)
    store.replace_source(con, "partition:cpu|checkpoint-500", "partition",
                         {**results_document("r1", [], {}), "results": [_local_row("/runs/checkpoint-500", 4385920, "r1")]})
    newer = [BenchmarkResult.from_json(_local_row("/runs/checkpoint-500", 10119936, "r2"))]
    with pytest.raises(LandingFileError, match="another model named 'checkpoint-500'"):
        check_one_model_per_name(con, "partition:cpu-abc|checkpoint-500", newer)
    check_one_model_per_name(con, "partition:cpu-abc|checkpoint-500", newer, replaced=["partition:cpu|checkpoint-500"])
    con.close()


def test_an_ingest_the_store_refuses_at_load_exits_1(tmp_path, monkeypatch):
    """The file was landed, then quarantined by the load (another model of its name): `devicefit
    ingest` printed "loaded 0 rows" and a red line, and exited 0 (found by review, 2026-11-30)."""
    from typer.testing import CliRunner

    from devicefit.cli import app
    from devicefit.results_io import results_document

    monkeypatch.setenv("DEVICEFIT_DATA_DIR", str(tmp_path / "data"))
    for run, parameters in (("r1", 4385920), ("r2", 10119936)):
        (tmp_path / f"{run}.json").write_text(json.dumps({**results_document(run, [], {}),
                                                          "results": [_local_row(f"/{run}/checkpoint-500", parameters, run)]}))
    runner = CliRunner()
    assert runner.invoke(app, ["ingest", str(tmp_path / "r1.json")]).exit_code == 0
    out = runner.invoke(app, ["ingest", str(tmp_path / "r2.json")])
    assert out.exit_code == 1 and "the store refused 1 of the file(s) this ingest landed" in out.output, out.output
