"""The one redactor: secrets out of anything recorded or shown.

Two kinds of secret reach benchledger:

- a server's API key (arms.api_key_env): read from the environment by each task and never
  written down. A server may echo it back (in an error, a log line, its model list, a
  finish reason), so everything that reaches a raw file, a task log or the terminal from a
  keyed server goes through `redact` first: the client's rows, the restart's manifest and
  observations, the effective config, the readiness errors.
- secrets written into an arm's `command` (`env HF_TOKEN=hf_... vllm serve ... --api-key
  sk-...`): the server must receive them as written, but the command is recorded in many
  places (the run's sweep text, restart.json, the effective config, XCom and the task log
  through the server handle). `command_secrets` finds them in the arguments, `redact_argv`
  and `redact_command_text` take them out of a command, `redact_sweep_text` out of a
  sweep file's text: what the run records instead of the file (benchledger.sweep.spec's
  `recorded_form`).

What counts as a secret in a command, and why not more:

- `NAME=value` where NAME looks like an environment variable (a whole word at the start of
  an argument or after a blank, so `--max-num-batched-tokens=8192` is not one) and
  `is_secret_name(NAME)`: the value;
- a long option whose last word names a secret (`--api-key`, `--hf-token`, `--token`,
  `--password`, `--client-secret`, ...; `--api-key=X` or `--api-key X`): its value. The
  last word only, so `--tokenizer /models/x`, `--return-tokens-as-token-ids` or
  `--ssl-keyfile key.pem` keep their values (paths, flags: what the run needs on record);
- a value shaped like a credential, wherever it stands: the prefixes of common issuers
  (`sk-`, `hf_`, `ghp_`, `github_pat_`, `xox?-`, `glpat-`, `nvapi-`, `AKIA`, `AIza`, a JWT)
  and any run of 32 or more letters and digits that mixes both and has the spread of
  random text (at least 4 bits of entropy per character). Hex strings are kept (a git
  revision or a sha256 is provenance, not a secret), and so are numbers and paths.

The arguments of a shell the command starts on purpose (`sh -c '...'`) are searched too:
an argument with blanks in it is split again like a shell would and searched word by word.
"""

from __future__ import annotations

import json
import math
import re
import shlex
import tomllib
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import Any

REDACTED = "<redacted>"

# A name (an environment variable's, an option's) that contains one of these holds a
# secret (HF_TOKEN, VLLM_API_KEY, ...): its value is recorded as REDACTED.
SECRET_NAME_PARTS = ("TOKEN", "KEY", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "AUTH")
# Words that contain a secret part but count or configure tokens (MAX_TOKENS=512,
# TOKENIZERS_PARALLELISM=false): ordinary settings, kept.
COUNTING_WORDS = frozenset({"TOKENS", "TOKENIZER", "TOKENIZERS", "TOKENIZE", "TOKENIZATION"})
# The last word of a long option that takes a secret (`--api-key`, `--hf-token`, ...).
SECRET_OPTION_WORDS = frozenset({"TOKEN", "KEY", "KEYS", "APIKEY", "SECRET", "PASSWORD",
                                 "PASSWD", "CREDENTIAL", "CREDENTIALS", "AUTH", "BEARER"})
# Credentials by their issuer's shape; each match is a secret wherever it stands.
CREDENTIAL_PATTERNS = tuple(re.compile(pattern) for pattern in (
    r"(?<![A-Za-z0-9])sk-[A-Za-z0-9_-]{12,}",  # OpenAI and compatible servers
    r"(?<![A-Za-z0-9])hf_[A-Za-z0-9]{12,}",  # Hugging Face
    r"(?<![A-Za-z0-9])gh[pousr]_[A-Za-z0-9]{20,}",  # GitHub
    r"(?<![A-Za-z0-9])github_pat_[A-Za-z0-9_]{20,}",
    r"(?<![A-Za-z0-9])xox[abprs]-[A-Za-z0-9-]{10,}",  # Slack
    r"(?<![A-Za-z0-9])glpat-[A-Za-z0-9_-]{20,}",  # GitLab
    r"(?<![A-Za-z0-9])nvapi-[A-Za-z0-9_-]{20,}",  # NVIDIA
    r"(?<![A-Za-z0-9])AKIA[0-9A-Z]{16}(?![A-Za-z0-9])",  # AWS access key id
    r"(?<![A-Za-z0-9])AIza[0-9A-Za-z_-]{35}",  # Google
    r"(?<![A-Za-z0-9_-])eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}",  # JWT
))
RANDOM_RUN = re.compile(r"[A-Za-z0-9]{32,}")
MIN_RANDOM_BITS = 4.0  # per character; English and CamelCase names stay below it
ASSIGNMENT = re.compile(r"(?:^|(?<=[\s;&|(]))([A-Za-z_][A-Za-z0-9_]*)=([^\s;&|)'\"]+)")
LONG_OPTION = re.compile(r"^--?([A-Za-z][A-Za-z0-9_-]*)(?:=(.*))?$", re.DOTALL)


def redact(value: Any, secret: str | None) -> Any:
    """`value` (a str, or dicts, lists and tuples of them, as deep as they go) with every
    occurrence of `secret` replaced by REDACTED; other values as they are."""
    if not secret:
        return value
    if isinstance(value, str):
        return value.replace(secret, REDACTED) if secret in value else value
    if isinstance(value, dict):
        return {k: redact(v, secret) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redact(v, secret) for v in value]
    return value


def shown_location(location: str) -> str:
    """A location (a URL or a path) as an error message may show it: a URL's user
    information, query and fragment, where credentials ride (`user:secret@`, a presigned
    URL's `?X-Amz-Signature=...`, `#access_token=...`), each replaced by REDACTED, and any
    credential-shaped value in the rest too."""
    head, fragment, _ = location.partition("#")
    head, query, _ = head.partition("?")
    scheme, sep, rest = head.partition("://")
    if sep:
        authority, slash, path = rest.partition("/")
        _, at, host = authority.rpartition("@")
        head = f"{scheme}://{REDACTED if at else ''}{at}{host}{slash}{path}"
    shown = head + (f"?{REDACTED}" if query else "") + (f"#{REDACTED}" if fragment else "")
    return replace_secrets(shown, credential_values(shown))


def is_secret_name(name: str) -> bool:
    """Whether a variable or option called `name` holds a secret: one of its words
    contains TOKEN, KEY, SECRET, ... (`HF_TOKEN`, `VLLM_API_KEY`, `APIKEY`), unless the
    word only counts tokens (`MAX_TOKENS`, `TOKENIZERS_PARALLELISM`)."""
    words = re.split(r"[^A-Z0-9]+", name.upper())
    return any(part in word for word in words if word not in COUNTING_WORDS
               for part in SECRET_NAME_PARTS)


def is_secret_option(name: str) -> bool:
    """Whether a long option (without its dashes) takes a secret: its last word names one
    (`api-key`, `hf_token`, `password`), so `tokenizer` or `ssl-keyfile` do not."""
    words = [w for w in re.split(r"[^A-Z0-9]+", name.upper()) if w]
    return bool(words) and words[-1] in SECRET_OPTION_WORDS


def looks_random(text: str) -> bool:
    """Letters and digits mixed, not hex, with the spread of random text."""
    if not (any(c.isdigit() for c in text) and any(c.isalpha() for c in text)):
        return False
    if all(c in "0123456789abcdefABCDEF" for c in text):
        return False
    counts = Counter(text)
    bits = -sum(n / len(text) * math.log2(n / len(text)) for n in counts.values())
    return bits >= MIN_RANDOM_BITS


def credential_values(text: str) -> list[str]:
    """Substrings of `text` shaped like a credential (see the module's docstring)."""
    found = [m.group(0) for pattern in CREDENTIAL_PATTERNS for m in pattern.finditer(text)]
    found += [m.group(0) for m in RANDOM_RUN.finditer(text) if looks_random(m.group(0))]
    return found


def _is_value(text: str) -> bool:
    """A value worth redacting: not empty, not the next option, not already redacted."""
    return bool(text) and not text.startswith("-") and text != REDACTED


def _words(argument: str) -> list[str]:
    """An argument with blanks (a shell script given to `sh -c`) as a shell splits it."""
    try:
        return shlex.split(argument)
    except ValueError:  # an unbalanced quote: the blanks still separate words
        return argument.split()


def command_secrets(argv: Sequence[str], depth: int = 0) -> list[str]:
    """The secret values in a command's arguments, each once (see the module's
    docstring for what counts)."""
    found: list[str] = []
    for index, argument in enumerate(argv):
        found += [value for name, value in ASSIGNMENT.findall(argument)
                  if is_secret_name(name) and _is_value(value)]
        option = LONG_OPTION.match(argument)
        if option and is_secret_option(option.group(1)):
            value = option.group(2)
            if value is None and index + 1 < len(argv):
                value = argv[index + 1]
            if value is not None and _is_value(value):
                found.append(value)
        found += credential_values(argument)
        if depth < 2 and any(c.isspace() for c in argument.strip()):
            found += command_secrets(_words(argument), depth + 1)
    return list(dict.fromkeys(v for v in found if v and v != REDACTED))


# A secret this long is replaced wherever it stands; a shorter one only as a whole word
# (`PASSWORD=x` must not turn `--x-flag` into `--<redacted>-flag`).
MIN_ANYWHERE = 8
WORD_EDGE = "A-Za-z0-9_\\-"


def replace_secrets(text: str, secrets: Iterable[str]) -> str:
    """`text` with each secret replaced by REDACTED (the longest first; a short one only
    where it is a whole word)."""
    for secret in sorted(set(secrets), key=len, reverse=True):
        if len(secret) >= MIN_ANYWHERE:
            text = text.replace(secret, REDACTED)
        else:
            text = re.sub(f"(?<![{WORD_EDGE}]){re.escape(secret)}(?![{WORD_EDGE}])",
                          REDACTED, text)
    return text


def redact_argv(argv: Sequence[str]) -> list[str]:
    """The command's arguments with every secret value replaced by REDACTED."""
    secrets = command_secrets(argv)
    return [replace_secrets(str(part), secrets) for part in argv]


def redact_command_text(command: str) -> str:
    """A command line as written (one string) with its secret values replaced; where the
    shell's quoting hides a value from the text, the command as redacted arguments."""
    words = _words(command)
    redacted = replace_secrets(command, command_secrets(words))
    if command_secrets(_words(redacted)):
        return shlex.join(redact_argv(words))
    return redacted


class UnredactableSweep(ValueError):
    """A secret in a command could not be found in the sweep's text as written (a TOML
    escape inside it): recording the text would keep it, so the sweep is refused."""


# How a command may stand in the TOML text: as itself (a literal string, or a basic
# string without escapes), or escaped the way a basic string (and JSON) escapes it.
TOML_STRING_BODIES: tuple[Callable[[str], str], ...] = (
    lambda text: text,
    lambda text: text.replace("\\", "\\\\").replace('"', '\\"'),
    lambda text: json.dumps(text)[1:-1],
    lambda text: json.dumps(text, ensure_ascii=False)[1:-1],
)


def _commands(text: str) -> list[str]:
    """The `command` of every arm of a sweep's TOML text and of every process its arms run
    on other nodes ([] when it is not TOML)."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return []  # not a sweep; parsing it says why
    arms = data.get("arms")
    if not isinstance(arms, list):
        return []
    arms = [arm for arm in arms if isinstance(arm, dict)]
    # each arm's head, then the processes it runs on other nodes ([[arms.processes]])
    tables = arms + [p for arm in arms if isinstance(arm.get("processes"), list)
                     for p in arm["processes"] if isinstance(p, dict)]
    return [table["command"] for table in tables if isinstance(table.get("command"), str)]


def redact_sweep_text(text: str, source: str = "<sweep>") -> str:
    """The sweep's text with the secrets of its arms' commands replaced by REDACTED, in
    those commands only (a name elsewhere in the file is never touched); `text` itself
    when there is none. UnredactableSweep when a secret is written with a TOML escape, so
    that it cannot be found in the text."""
    redacted = text
    for command in _commands(text):
        secrets = command_secrets(_words(command))
        if not secrets:
            continue
        clean = redact_command_text(command)
        written = [(encode(command), encode(clean)) for encode in TOML_STRING_BODIES]
        found = [(old, new) for old, new in written if old in redacted]
        if found:
            redacted = redacted.replace(*found[0])
        else:  # other escapes in the command: its long secrets may still stand as written
            redacted = replace_secrets(redacted, [s for s in secrets if len(s) >= MIN_ANYWHERE])
    if any(command_secrets(_words(command)) for command in _commands(redacted)):
        raise UnredactableSweep(
            f"{source}: an arm's command holds a secret written with a TOML escape (or "
            "quoted in parts), so it cannot be left out of the recorded sweep; write it "
            "plainly, or pass it in the environment of the run (arms.api_key_env for the "
            "server's key)")
    return redacted
