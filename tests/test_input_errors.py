"""Bad models, data and command lines stop before Ray starts, with one line naming the key, the file and
the row; an error is reported as itself, not as the shutdown after it; a signal stops a run cleanly."""

import dataclasses
import json
import logging
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import traceback
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf
from transformers import AutoTokenizer

from tests.e2e_utils import HANG_S, tiny_config
from verl.config import ConfigError, PolicyIterationConfig, TaskConfig, TrainerConfig, compose_config
from verl.data.tasks import load_split, load_task
from verl.eval.config import EvalConfig, load_eval_config
from verl.trainer import launch
from verl.trainer.cli_keys import unknown_key_errors
from verl.trainer.config_loader import load_config
from verl.trainer.main_sft import SFTConfig, load_sft_config
from verl.utils import checkpoint
from verl.utils.cleanup import closed_after
from verl.utils.fs import read_jsonl

REPO = Path(__file__).resolve().parent.parent
MODEL_KEY = "actor_rollout_ref.model.path"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja")


@pytest.fixture
def no_ray(monkeypatch):
    """launch.run, failing the test if it gets as far as starting Ray."""

    def start_ray(config):
        pytest.fail("the run got as far as starting Ray")

    monkeypatch.setattr(launch, "start_ray", start_ray)
    return launch.run


def exit_line(run, config) -> str:
    """The message `run(config)` exits with (`no_ray`: before Ray starts); it must be one line."""
    with pytest.raises(SystemExit) as exited:
        run(config)
    message = str(exited.value.code)
    assert "\n" not in message
    return message


def config_error(config_name: str, *overrides: str) -> str:
    with pytest.raises(ConfigError) as error:
        load_config(compose_config(config_name, list(overrides)))
    return str(error.value)


# --- models ---------------------------------------------------------------------------------------


def model_copy(tiny_assets, tmp_path, keep) -> Path:
    """The tiny model directory with only the files `keep` accepts."""
    model = tmp_path / "model"
    model.mkdir()
    for f in (tiny_assets / "model").iterdir():
        if keep(f.name):
            shutil.copy(f, model / f.name)
    return model


def model_config_error(tiny_assets, tmp_path, model_path) -> str:
    data = tiny_assets / "data"
    return config_error(
        "tiny_longcot",
        f"{MODEL_KEY}={model_path}",
        f"data.train_files=[{data / 'train.jsonl'}]",
        f"data.val_files=[{data / 'val.jsonl'}]",
    )


def test_a_model_directory_without_tokenizer_files_is_refused_naming_the_key(tiny_assets, tmp_path):
    model = model_copy(tiny_assets, tmp_path, lambda name: name not in TOKENIZER_FILES)
    assert model_config_error(tiny_assets, tmp_path, model) == (
        f"{MODEL_KEY}={str(model)!r}: not a complete model directory: no tokenizer files "
        "(tokenizer.json, tokenizer.model or vocab.json + merges.txt)"
    )


def test_a_model_directory_with_only_config_json_is_refused_naming_what_is_missing(tiny_assets, tmp_path):
    model = model_copy(tiny_assets, tmp_path, lambda name: name == "config.json")
    assert model_config_error(tiny_assets, tmp_path, model) == (
        f"{MODEL_KEY}={str(model)!r}: not a complete model directory: no weights (model.safetensors or "
        "pytorch_model.bin); no tokenizer files (tokenizer.json, tokenizer.model or vocab.json + merges.txt)"
    )


def test_a_tokenizer_without_a_chat_template_is_refused(tiny_assets, tmp_path):
    model = model_copy(tiny_assets, tmp_path, lambda name: name != "chat_template.jinja")
    assert model_config_error(tiny_assets, tmp_path, model).endswith(
        "not a complete model directory: no chat template (chat_template.jinja, or chat_template in "
        "tokenizer_config.json)"
    )


def test_a_local_path_with_a_typo_is_never_sent_to_the_hub(tiny_assets, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    shutil.copytree(tiny_assets / "model", tmp_path / "models" / "tiny")
    connections = []  # every connection attempt (a hub request opens one), failed at once

    def no_network(sock, address):
        connections.append(address)
        raise OSError("the network is not for config checks")

    monkeypatch.setattr(socket.socket, "connect", no_network)
    message = model_config_error(tiny_assets, tmp_path, "models/tiyn")  # looks like org/name
    assert connections == []
    assert message == (
        f"{MODEL_KEY}='models/tiyn': no such model directory (models/ is a local directory, so this is not a "
        "hub id); did you mean 'models/tiny'?"
    )


def test_a_corrupt_tokenizer_file_exits_naming_the_key(tiny_assets, tmp_path):
    model = model_copy(tiny_assets, tmp_path, lambda name: True)
    (model / "tokenizer.json").write_text('{"version": "1.0"}')
    with pytest.raises(SystemExit) as exited:
        launch.load_tokenizer(str(model))
    assert str(exited.value.code).startswith(
        f"model error: {MODEL_KEY}={str(model)!r}: cannot load its tokenizer (KeyError"
    )


def test_the_cli_refuses_an_incomplete_model_in_one_line(tiny_assets, tmp_path):
    model = model_copy(tiny_assets, tmp_path, lambda name: name == "config.json")
    result = subprocess.run(
        [sys.executable, "-m", "verl.trainer.main_policy_iteration", "--config-name=tiny_longcot",
         f"{MODEL_KEY}={model}", f"data.train_files=[{tiny_assets / 'data' / 'train.jsonl'}]",
         f"data.val_files=[{tiny_assets / 'data' / 'val.jsonl'}]", f"hydra.run.dir={tmp_path / 'hydra'}"],
        cwd=REPO, capture_output=True, text=True, timeout=HANG_S,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr[-2000:]
    assert result.stderr.startswith(
        f"config error: {MODEL_KEY}={str(model)!r}: not a complete model directory"
    )
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr


def test_eval_and_sft_check_their_model_path_the_same_way(tiny_assets, tmp_path):
    model = model_copy(tiny_assets, tmp_path, lambda name: name not in TOKENIZER_FILES)
    eval_cfg = {"model_path": str(model), "output_dir": str(tmp_path / "out"),
                "data_files": [str(tiny_assets / "data" / "val.jsonl")]}  # fmt: skip
    with pytest.raises(
        ConfigError, match=rf"^model_path='{model}': not a complete model directory \({model}\): "
    ):
        load_eval_config(OmegaConf.create(eval_cfg))
    with initialize_config_dir(config_dir=str(REPO / "verl/trainer/config"), version_base="1.3"):
        sft_cfg = compose(
            config_name="sft_tiny", overrides=[f"model.path={model}", f"output_dir={tmp_path / 's'}"]
        )
    with pytest.raises(
        ConfigError, match=rf"^model.path={model}: not a complete model directory: no tokenizer"
    ):
        load_sft_config(sft_cfg)


# --- data -----------------------------------------------------------------------------------------


def good_row(question: str = "a1 b2", answer: object = "3") -> dict:
    return {"data_source": "synthetic/running_sum", "prompt": [{"role": "user", "content": question}],
            "reward_model": {"ground_truth": answer}, "extra_info": {"q": question}}  # fmt: skip


def data_config(tiny_assets, tmp_path, train_file: Path, *overrides: str) -> PolicyIterationConfig:
    return tiny_config(
        "tiny_longcot", tiny_assets, tmp_path / "run", f"data.train_files=[{train_file}]", *overrides
    )


def jsonl(*rows: object) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in rows).encode()


def with_answer(answer: object) -> bytes:
    return jsonl(good_row(), good_row("a2 b2", answer))


BAD_FILES = {  # name -> (the file's bytes, the line the run exits with, after the file's path)
    "invalid utf-8": (
        jsonl(good_row()) + b'{"prompt": "caf\xe9"}\n',
        ":2: not valid UTF-8 (byte 0xe9 at byte 16 of the line)",
    ),
    "empty file": (b"", ": no rows (the file is empty)"),
    "row is an array": (
        jsonl(good_row(), ["a1", "3"]),
        ":2: a row must be a JSON object, got list ['a1', '3']",
    ),
    "answer is a list": (
        with_answer([1, 2]),
        " row 1: reward_model.ground_truth must be a string or a finite number, got list [1, 2]",
    ),
    "answer is a dict": (
        with_answer({"x": 1}),
        " row 1: reward_model.ground_truth must be a string or a finite number, got dict {'x': 1}",
    ),
    "answer is a bool": (
        with_answer(True),
        " row 1: reward_model.ground_truth must be a string or a finite number, got bool True",
    ),
    "answer is NaN": (
        with_answer(math.nan),
        " row 1: reward_model.ground_truth must be a string or a finite number, got float nan",
    ),
    "reward_model is a string": (
        jsonl({**good_row(), "reward_model": "3"}),
        " row 0: reward_model must be a JSON object with a ground_truth, got '3'",
    ),
    "extra_info is a list": (
        jsonl(good_row(), {**good_row(), "extra_info": [1, 2]}),
        " row 1: extra_info must be a JSON object, got list [1, 2]",
    ),
}


@pytest.mark.parametrize("case", list(BAD_FILES))
def test_a_bad_data_file_exits_before_ray_naming_file_and_row(case, tiny_assets, tmp_path, no_ray):
    content, says = BAD_FILES[case]
    path = tmp_path / "train.jsonl"
    path.write_bytes(content)
    assert exit_line(no_ray, data_config(tiny_assets, tmp_path, path)) == f"data error: {path}{says}"


def test_a_missing_prompt_column_is_a_config_error_naming_the_key(tiny_assets, tmp_path, no_ray):
    path = tmp_path / "train.jsonl"
    path.write_bytes(jsonl(good_row()))
    config = data_config(tiny_assets, tmp_path, path, "data.prompt_key=question")
    assert exit_line(no_ray, config) == (
        f"config error: data.prompt_key='question': {path} has no such column "
        "(row 0 has ['data_source', 'extra_info', 'prompt', 'reward_model'])"
    )


def test_a_prompt_limit_that_drops_every_row_is_a_config_error(tiny_assets, tmp_path, no_ray):
    train = tiny_assets / "data" / "train.jsonl"
    config = data_config(tiny_assets, tmp_path, train, "data.max_prompt_length=4")
    message = exit_line(no_ray, config)
    assert message.startswith(
        f"config error: data.max_prompt_length: all 64 prompts of ['{train}'] are longer "
    )
    assert "than the 4 tokens allowed" in message and "the shortest has 8" in message


def test_an_empty_task_file_names_the_task_and_file(tiny_assets, tmp_path, no_ray):
    path = tmp_path / "empty.jsonl"
    path.write_text("\n")
    config = data_config(
        tiny_assets, tmp_path, tiny_assets / "data" / "train.jsonl",
        f"+train_tasks.mine.path={path}", "+train_tasks.mine.data_source=mine",
    )  # fmt: skip
    assert exit_line(no_ray, config) == f"data error: task mine: {path}: no rows (the file is empty)"


def test_task_answers_of_the_wrong_type_are_counted_or_an_error_by_bad_rows(tiny_assets, tmp_path, caplog):
    path = tmp_path / "t.jsonl"
    answers = ["5", [1, 2], {"x": 1}, True, 7]
    path.write_bytes(jsonl(*({"problem": f"p{i}", "answer": a} for i, a in enumerate(answers))))
    tokenizer = AutoTokenizer.from_pretrained(tiny_assets / "model")
    with caplog.at_level(logging.WARNING, logger="verl.data.tasks"):
        items = load_task("t", TaskConfig(path=str(path), data_source="s"), tokenizer, 100)
    assert [it.ground_truth for it in items] == ["5", "7"]
    assert f"task t: dropped 3 rows of {path}: 3 answer of wrong type" in caplog.text
    with pytest.raises(ValueError, match=rf"^task t: {path} row 1: the answer has type list, not str"):
        load_task("t", TaskConfig(path=str(path), data_source="s", bad_rows="error"), tokenizer, 100)


def test_train_files_naming_a_directory_fails_validation(tiny_assets, tmp_path):
    message = config_error(
        "tiny_longcot", f"{MODEL_KEY}={tiny_assets / 'model'}", f"data.train_files=[{tmp_path}]",
        f"data.val_files=[{tiny_assets / 'data' / 'val.jsonl'}]",
    )  # fmt: skip
    assert message == f"data.train_files[0]={str(tmp_path)!r}: a directory, not a data file"


def test_duplicate_prompts_are_counted_and_dropped_on_request(tiny_assets, tmp_path, caplog):
    path = tmp_path / "train.jsonl"
    other_answer = good_row(answer="4")  # the same prompt with another answer is another problem
    path.write_bytes(jsonl(good_row(), good_row("a5"), good_row(), other_answer, good_row("a5")))
    tokenizer = AutoTokenizer.from_pretrained(tiny_assets / "model")
    for drop, questions, action in (
        ("false", ["a1 b2", "a5", "a1 b2", "a1 b2", "a5"], "kept (data.drop_duplicates=true drops them)"),
        ("true", ["a1 b2", "a5", "a1 b2"], "dropped"),
    ):
        config = data_config(tiny_assets, tmp_path, path, f"data.drop_duplicates={drop}")
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="verl.data.tasks"):
            items = load_split(config, "train", tokenizer, 100)
        assert [it.extra_info["q"] for it in items] == questions
        repeats = "2 of 5 prompts repeat an earlier one (same prompt, answer and data_source)"
        assert f"train: {repeats}; {action}" in caplog.text


# --- command lines --------------------------------------------------------------------------------


def test_a_key_typo_on_the_command_line_gets_a_did_you_mean(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "verl.trainer.main_policy_iteration", "--config-name=tiny_longcot",
         "data.trian_batch_size=8", f"hydra.run.dir={tmp_path / 'hydra'}"],
        cwd=REPO, capture_output=True, text=True, timeout=HANG_S,
    )  # fmt: skip
    assert result.returncode == 2
    assert result.stderr == (
        "config error: data.trian_batch_size: unknown key; did you mean data.train_batch_size?\n"
    )


def test_unknown_keys_are_found_in_every_entry_points_schema():
    overrides = [
        "--config-name=x", "data.seed=2", "+data.new=1", "~data.seed", "hydra.run.dir=.",
        "environment=delethink", "train_tasks.aime.nn=2", "actor_rollout_ref.rollout.gym.env_config.k=1",
        "actor_rollout_ref.actor.optim.lrr=1", "trainer.zzz=1",
    ]  # fmt: skip
    assert unknown_key_errors(PolicyIterationConfig, overrides) == [
        "train_tasks.aime.nn: unknown key; did you mean train_tasks.aime.n?",
        "actor_rollout_ref.actor.optim.lrr: unknown key; did you mean actor_rollout_ref.actor.optim.lr?",
        f"trainer.zzz: unknown key; known keys: {[f.name for f in dataclasses.fields(TrainerConfig)]}",
    ]
    assert unknown_key_errors(EvalConfig, ["sampling.temprature=0.5"]) == [
        "sampling.temprature: unknown key; did you mean sampling.temperature?"
    ]
    assert unknown_key_errors(SFTConfig, ["train.stps=3", "model.path=x"]) == [
        "train.stps: unknown key; did you mean train.steps?"
    ]


# --- errors that hide the cause, and signals ---------------------------------------------------------


def test_closers_after_an_error_are_best_effort_and_the_error_stays_the_one_reported(caplog):
    closed = []

    def failing_close():
        closed.append("failing")
        raise RuntimeError("cannot reach the dead worker")

    with pytest.raises(KeyError) as error, caplog.at_level(logging.WARNING, logger="verl.utils.cleanup"):
        with closed_after(failing_close, lambda: closed.append("second")):
            raise KeyError("the worker died")
    assert error.value.__context__ is None and closed == ["failing", "second"]
    assert "failing_close failed too" in caplog.text and "cannot reach the dead worker" in caplog.text
    # without an error in the block, a failing closer is the error
    with pytest.raises(RuntimeError, match="cannot reach"):
        with closed_after(failing_close):
            pass


def test_ctrl_c_stops_the_block_with_a_line_and_restores_the_handlers(tmp_path, capsys):
    before = signal.getsignal(signal.SIGINT)
    with pytest.raises(SystemExit) as exited:
        with launch.SignalStop(str(tmp_path)):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(10)  # the handler raises here
    assert exited.value.code == 128 + signal.SIGINT
    assert capsys.readouterr().err == f"stopped by SIGINT; no checkpoint was written yet in {tmp_path}\n"
    assert signal.getsignal(signal.SIGINT) is before


@pytest.mark.slow
def test_a_dead_worker_is_the_error_reported_not_the_shutdown_after_it(
    tiny_assets, ray_session, tmp_path, monkeypatch, caplog
):
    import ray

    class KillsAWorker(launch.TRAINERS["ppo"]):
        def train_step(self, step):
            ray.kill(self.workers.workers[0])
            return super().train_step(step)

    monkeypatch.setitem(launch.TRAINERS, "ppo", KillsAWorker)
    config = tiny_config("tiny_longcot", tiny_assets, tmp_path / "run", "data.max_response_length=8")
    with pytest.raises(ray.exceptions.RayActorError) as error, caplog.at_level(logging.WARNING):
        launch.run(config)
    frames = [frame.name for frame in traceback.extract_tb(error.tb)]
    assert "train_step" in frames and "shutdown" not in frames
    assert error.value.__context__ is None
    assert "ActorRolloutWorkerGroup.shutdown failed too" in caplog.text


RUN_TINY_LONGCOT = """
import sys
from verl.config import compose_config
from verl.trainer.config_loader import load_config
from verl.trainer.launch import run
run(load_config(compose_config("tiny_longcot", sys.argv[1:])))
"""


@pytest.mark.slow
@pytest.mark.parametrize("launcher", ["ray", "local"])
def test_sigterm_stops_a_run_cleanly_leaving_checkpoint_and_metrics(launcher, tiny_assets, tmp_path):
    run_dir = tmp_path / "run"
    overrides = [
        f"trainer.launcher={launcher}",
        f"{MODEL_KEY}={tiny_assets / 'model'}", f"data.train_files=[{tiny_assets / 'data' / 'train.jsonl'}]",
        f"data.val_files=[{tiny_assets / 'data' / 'val.jsonl'}]", f"trainer.default_local_dir={run_dir}",
        "trainer.logger=[jsonl]", "trainer.val_before_train=false", "data.train_batch_size=2",
        "actor_rollout_ref.rollout.n=2", "actor_rollout_ref.actor.ppo_mini_batch_size=1",
        "data.max_response_length=8", "trainer.save_freq=1", "trainer.total_training_steps=1000",
    ]  # fmt: skip
    log = tmp_path / "stderr.txt"  # a file, not a pipe: a full pipe would block the run
    with log.open("w") as stderr_file:
        proc = subprocess.Popen(
            [sys.executable, "-c", RUN_TINY_LONGCOT, *overrides], cwd=REPO, stderr=stderr_file
        )
    try:
        deadline = time.monotonic() + HANG_S
        while (
            not (run_dir / "global_step_1").is_dir() and time.monotonic() < deadline and proc.poll() is None
        ):
            time.sleep(0.5)
        assert (run_dir / "global_step_1").is_dir(), log.read_text()[-3000:]
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=HANG_S)
    finally:
        proc.kill()
    stderr = log.read_text()
    assert proc.returncode == 128 + signal.SIGTERM, stderr[-3000:]
    assert "SIGTERM received" not in stderr and "Traceback" not in stderr  # no Ray crash dump
    last = checkpoint.step_dirs(run_dir)[0]
    assert f"stopped by SIGTERM; rerun the same command to resume from {last}\n" in stderr
    assert checkpoint.checkpoint_problem(last) is None
    steps = [m["step"] for m in read_jsonl(run_dir / "metrics.jsonl")]
    assert steps == list(range(1, len(steps) + 1)) and len(steps) >= checkpoint.step_of(last)


def scripts_that_run_python() -> list[Path]:
    """Every script of examples/ and recipes/ that runs the project's interpreter."""
    scripts = sorted([*REPO.glob("examples/**/*.sh"), *REPO.glob("recipes/**/*.sh")])
    return [s for s in scripts if "$PYTHON" in s.read_text() and s.name != "python_env.sh"]


def test_every_script_that_runs_python_picks_it_in_one_place():
    scripts = scripts_that_run_python()
    assert len(scripts) >= 12  # the templates, the paper's four recipes, the testbed's, prepare_tiny
    for script in scripts:
        assert "source examples/python_env.sh" in script.read_text(), script


@pytest.fixture(scope="module")
def python_without_the_project(tmp_path_factory) -> Path:
    venv = tmp_path_factory.mktemp("bare") / "venv"
    subprocess.run([sys._base_executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    return venv / "bin" / "python"


def test_without_PYTHON_a_script_runs_the_checkouts_venv_else_python_on_path(
    tmp_path, python_without_the_project
):
    """`make install` leaves .venv/bin/python in the checkout, and a script run with PYTHON unset uses it;
    without it, `python` on PATH. In a copy of examples/, a script that starts as every script does (from
    the checkout root, sourcing python_env.sh) and prints the interpreter it got; .venv/bin/python runs
    this interpreter, and the `python` on PATH one without the project."""
    checkout = tmp_path / "checkout"
    shutil.copytree(REPO / "examples", checkout / "examples")
    script = checkout / "examples" / "which_python.sh"
    script.write_text(
        'cd "$(dirname "$0")/.."\nsource examples/python_env.sh\n'
        '"$PYTHON" -c "import sys; print(sys.argv[1])" "$PYTHON"\n'
    )
    venv_python = checkout / ".venv" / "bin" / "python"
    path_python = tmp_path / "path" / "python"
    for wrapper, python in ((venv_python, sys.executable), (path_python, python_without_the_project)):
        wrapper.parent.mkdir(parents=True)
        wrapper.write_text(f'#!/bin/sh\nexec {python} "$@"\n')
        wrapper.chmod(0o755)
    env = {key: value for key, value in os.environ.items() if key != "PYTHON"}
    env["PATH"] = f"{path_python.parent}:{env['PATH']}"

    def run_script():
        return subprocess.run(
            ["bash", str(script)], cwd="/", env=env, capture_output=True, text=True, timeout=HANG_S
        )

    done = run_script()
    assert (done.returncode, done.stdout) == (0, ".venv/bin/python\n"), done.stderr
    shutil.rmtree(checkout / ".venv")
    done = run_script()
    assert done.returncode == 2 and done.stderr.startswith("PYTHON=python cannot import torch"), done.stderr
    # PYTHON, when set, wins over both
    done = subprocess.run(["bash", str(script)], cwd="/", env={**env, "PYTHON": sys.executable},
                          capture_output=True, text=True, timeout=HANG_S)  # fmt: skip
    assert (done.returncode, done.stdout) == (0, f"{sys.executable}\n"), done.stderr


@pytest.mark.parametrize("script", scripts_that_run_python(), ids=lambda s: str(s.relative_to(REPO)))
def test_a_python_without_the_project_stops_a_script_with_one_line(script, python_without_the_project):
    """Run from another directory: the check must not count the checkout's verl/ as installed."""
    env = {**os.environ, "PYTHON": str(python_without_the_project), "NODE_RANK": "0", "DRY_RUN": "1"}
    done = subprocess.run(
        ["bash", str(script)], cwd="/", env=env, capture_output=True, text=True, timeout=HANG_S
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr == (
        f"PYTHON={python_without_the_project} cannot import torch, transformers, hydra and verl: run 'make "
        "install' and use .venv/bin/python (or activate .venv), or set PYTHON to an interpreter with the "
        "project installed\n"
    )
    assert done.stdout == ""
