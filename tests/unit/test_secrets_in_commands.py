"""Secrets written into an arm's `command` (issue #22, item 5): the server gets them as
written, every record gets `<redacted>`: the run's sweep text (and so runs.sweep_toml), the
restart manifest's command, the effective config, the server handle (XCom, task log)."""

from __future__ import annotations

import json
import shlex
import sys
import time
from pathlib import Path

import pytest

from benchledger.raw.layout import RunLayout, read_json
from benchledger.redaction import (
    REDACTED,
    command_secrets,
    is_secret_name,
    redact_argv,
    redact_command_text,
    redact_sweep_text,
)
from benchledger.restart.steps import (
    launch_restart,
    recorded_sweep,
    stop_restart,
    write_run_manifest,
)
from benchledger.server import lifecycle
from benchledger.sweep.spec import CommandArm, SweepError, load_sweep, parse_recorded
from tests.sweeps import command_arm, sweep, write_sweep

HF = "hf_plantedXYZabcdefghij0123456789"
OPENAI = "sk-plantedABCdefghij0123456789"
FLAG = "plantedFlagValue42"
SHORT = "pw1"
RANDOM = "aB3dE5fG7hI9jK1lM3nO5pQ7rS9tU1vW2xY4z"
PLANTED = (HF, OPENAI, FLAG, SHORT, RANDOM)


@pytest.mark.parametrize(("command", "secrets"), [
    (f"env HF_TOKEN={HF} OPENAI_API_KEY={OPENAI} vllm serve m", [HF, OPENAI]),
    (f"vllm serve m --api-key {FLAG}", [FLAG]),
    (f"vllm serve m --api-key={FLAG} --hf-token {HF}", [FLAG, HF]),
    (f"env DB_PASSWORD={SHORT} server", [SHORT]),
    (f"server --model m --some-flag {OPENAI}", [OPENAI]),  # by its shape
    (f"server {RANDOM}", [RANDOM]),  # a long random run of letters and digits
    (f"sh -c 'exec vllm serve m --token {FLAG}' sh", [FLAG]),  # inside a shell's script
])
def test_secrets_in_a_command_are_found(command, secrets):
    assert sorted(command_secrets(shlex.split(command))) == sorted(secrets)
    redacted = redact_command_text(command)
    assert not any(secret in redacted for secret in secrets)
    assert redacted.count(REDACTED) == len(secrets)


@pytest.mark.parametrize("command", [
    "vllm serve /models/Meta-Llama-3.1-8B-Instruct --port {port} --max-model-len 8192",
    "vllm serve meta-llama/Llama-3.1-8B-Instruct --tokenizer /models/tokenizer-v2",
    "vllm serve m --max-num-batched-tokens=8192 --max-tokens 100 MAX_TOKENS=100",
    "vllm serve m --return-tokens-as-token-ids Qwen/Qwen2.5-7B-Instruct",
    "server --ssl-keyfile /etc/key.pem --revision 0123456789abcdef0123456789abcdef01234567",
    "server --seed 1234567890123456789012345678901234567890 TOKENIZERS_PARALLELISM=false",
    "server --model ThisIsAVeryLongCamelCaseModelNameWithoutAnyDigits",
    "sh -c 'exec vllm serve $MODEL --port {port}'",
])
def test_ordinary_arguments_are_kept(command):
    assert command_secrets(shlex.split(command)) == []
    assert redact_command_text(command) == command


def test_a_short_secret_is_replaced_only_where_it_is_a_whole_word():
    argv = ["env", "PASSWORD=x", "prog", "--x-flag", "--mode=x1"]
    assert redact_argv(argv) == ["env", f"PASSWORD={REDACTED}", "prog", "--x-flag",
                                 "--mode=x1"]


def test_names_that_count_tokens_are_no_secret_names():
    assert is_secret_name("HF_TOKEN") and is_secret_name("VLLM_API_KEY")
    assert is_secret_name("APIKEY") and is_secret_name("DB_PASSWORD")
    assert not is_secret_name("MAX_TOKENS") and not is_secret_name("TOKENIZERS_PARALLELISM")


def command_sweep(command: str, name: str = "secrets") -> dict:
    return sweep(name, [command_arm("a", command, model="x")])


def sweep_file(tmp_path: Path, command: str, name: str = "secrets") -> Path:
    return write_sweep(tmp_path / f"{name}.toml", command_sweep(command, name))


def test_the_recorded_sweep_text_has_no_secret_and_keeps_everything_else(tmp_path):
    command = f"env HF_TOKEN={HF} server --api-key {FLAG} --port {{port}} --model x"
    text = sweep_file(tmp_path, command).read_text()
    recorded = redact_sweep_text(text)
    assert not any(secret in recorded for secret in PLANTED)
    assert recorded == text.replace(HF, REDACTED).replace(FLAG, REDACTED)


def test_a_secret_written_with_a_toml_escape_is_refused(tmp_path):
    # TOML text on purpose: the escape is how the secret is written (tomli_w writes none)
    path = tmp_path / "escaped.toml"
    escaped = OPENAI.replace("p", "\\u0070", 1)
    path.write_text('[sweep]\nname = "secrets"\n\n[[arms]]\nname = "a"\nserver = "command"\n'
                    f'model = "x"\ncommand = "server --flag {escaped}"\n\n'
                    '[[workloads]]\nname = "code"\n')
    with pytest.raises(SweepError, match="TOML escape"):
        load_sweep(path)


# --- a run: what is recorded, and what the server gets -------------------------------------

DUMP = ("import json, os, sys; json.dump({'argv': sys.argv[2:], 'hf': os.environ.get('HF_TOKEN')}, "
        "open(sys.argv[1], 'w')); import time; time.sleep(30)")


def dumping_command(out: Path) -> str:
    return (f"env HF_TOKEN={HF} OPENAI_API_KEY={OPENAI} {shlex.quote(sys.executable)} -c "
            f"{shlex.quote(DUMP)} {shlex.quote(str(out))} --port {{port}} --api-key {FLAG} "
            f"--hf-token={SHORT} {RANDOM}")


def wait_for(path: Path) -> dict:
    deadline = time.monotonic() + 20
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.1)
    return json.loads(path.read_text())


def contains_planted(value) -> list[str]:
    text = json.dumps(value)
    return [secret for secret in PLANTED if secret in text]


def test_launch_records_the_command_redacted_and_runs_it_as_written(tmp_path):
    out = tmp_path / "received.json"
    handle = lifecycle.launch(CommandArm(name="a", server="command", model="x",
                                  command=dumping_command(out)), tmp_path / "server.log", 1)
    try:
        received = wait_for(out)
    finally:
        lifecycle.stop(handle, grace_s=5)
    assert received["argv"][-4:] == ["--api-key", FLAG, f"--hf-token={SHORT}", RANDOM]
    assert received["hf"] == HF
    assert contains_planted(handle.to_dict()) == []  # XCom, restart.json, the task log
    assert handle.command[-4:] == ["--api-key", REDACTED, f"--hf-token={REDACTED}", REDACTED]


def test_a_run_records_no_secret_and_launches_from_the_file(tmp_path):
    out = tmp_path / "received.json"
    path = sweep_file(tmp_path, dumping_command(out))
    layout = RunLayout(tmp_path / "data", "manual__secrets")
    write_run_manifest(layout, path)
    manifest = read_json(layout.run_manifest)
    assert contains_planted(manifest) == []
    parse_recorded(manifest["sweep_toml"], manifest["sweep_sha256"], "recorded")
    sweep, sha256 = recorded_sweep(layout, path)
    handle = launch_restart(layout, sweep, "a", 0, sweep_sha256=sha256, sweep_path=path)
    try:
        received = wait_for(out)
    finally:
        stop_restart(layout, "a", 0, handle)
    assert received["hf"] == HF and FLAG in received["argv"]  # the server got them
    assert contains_planted(handle) == []
    assert contains_planted(read_json(layout.restart_manifest("a", 0))) == []


def test_a_sweep_file_changed_since_plan_cannot_give_its_secrets(tmp_path):
    path = sweep_file(tmp_path, f"env HF_TOKEN={HF} sleep 30")
    layout = RunLayout(tmp_path / "data", "manual__changed")
    write_run_manifest(layout, path)
    sweep, sha256 = recorded_sweep(layout, path)
    write_sweep(path, command_sweep(f"env HF_TOKEN={HF} sleep 31"))
    with pytest.raises(RuntimeError, match="now holds another sweep"):
        launch_restart(layout, sweep, "a", 0, sweep_sha256=sha256, sweep_path=path)
    restart = read_json(layout.restart_manifest("a", 0))
    assert restart["status"] == "failed" and "rerun the sweep" in restart["error"]
    assert contains_planted(restart) == []
