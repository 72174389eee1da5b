"""The `cli` backend: Claude Code headless, confined to answering one prompt with text.

The prompt is data: it goes to the CLI on standard input, never on the command
line (where a prompt starting with `--` would be read as an option, and argv
is limited to 128 KiB). The CLI runs in a fresh, empty, private working
directory (with a private TMPDIR) that is removed afterwards, loads no user, project or local
settings (so no hooks, `apiKeyHelper`, `env`, permissions or CLAUDE.md from
anywhere a job could write), no MCP servers, no skills or slash commands, no
attachments (`@path` mentions are not read), and has no tools at all: jobcore
only needs the text of the answer.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from collections.abc import Callable

from jobcore_shell.runner import Finished, run_command

from jobcore import PermanentError
from jobcore_claude.backends import TransientClaudeError, redact, retryable_status, scrub
from jobcore_claude.settings import ClaudeSettings

# Every option jobcore passes; nothing from the payload is ever among them.
CONFINEMENT = (
    "--setting-sources=",  # no user/project/local settings: hooks, apiKeyHelper, env, CLAUDE.md
    "--strict-mcp-config",  # MCP servers only from --mcp-config, which is never given
    "--tools=",  # no built-in tools (read, write, bash, web …): the answer is text only
    "--disable-slash-commands",  # no skills; a prompt `/name …` is not run as a command
    "--safe-mode",  # customisations (plugins, agents, output styles …) off as well
    "--no-session-persistence",  # the prompt and answer are not kept on disk by the CLI
)
UNKNOWN_OPTION = re.compile(r"unknown option '([^']+)'")
OUTPUT_LIMIT = 32 * 1024 * 1024  # bytes of JSON read from the CLI's output
STDERR_LIMIT = 64 * 1024  # bytes of its stderr kept (the tail)


def command(program: str, settings: ClaudeSettings) -> list[str]:
    """The CLI's argv: print mode, JSON output, the confinement and the model; no prompt."""
    return [program, "-p", "--output-format=json", *CONFINEMENT, f"--model={settings.model}"]


def ask_cli(prompt: str, settings: ClaudeSettings, should_stop: Callable[[], str | None]) -> str:
    """Run `claude -p` with the prompt on stdin in a private empty folder; its JSON `result`."""
    program = shutil.which(settings.bin)
    if program is None:
        raise PermanentError(
            f"Claude Code binary {settings.bin!r} not found on PATH; install "
            "@anthropic-ai/claude-code or set [plugins.claude] bin / JOBCORE_CLAUDE_BIN"
        )
    env = {
        "CLAUDE_CODE_MAX_RETRIES": os.environ.get("CLAUDE_CODE_MAX_RETRIES", "0"),
        # `@path` in a prompt would otherwise be read (a folder listed) and sent to the model,
        # tools or not: any file of the worker. No other attachment is wanted either.
        "CLAUDE_CODE_DISABLE_ATTACHMENTS": "1",
    }
    if settings.base_url:
        env["ANTHROPIC_BASE_URL"] = settings.base_url
    with (
        tempfile.TemporaryDirectory(prefix="jobcore-claude-") as private,
        tempfile.TemporaryFile() as stdin,  # unlinked at once: no other process can open it
        tempfile.TemporaryFile() as stdout,  # a file, not a pipe: the CLI exits before it
    ):  # has written a large answer to a pipe (its JSON was cut at a 64 KiB multiple)
        workdir, tmpdir = os.path.join(private, "work"), os.path.join(private, "tmp")
        os.mkdir(workdir, 0o700)
        os.mkdir(tmpdir, 0o700)
        env["TMPDIR"] = tmpdir  # the CLI's own scratch files go, and are removed, with it
        stdin.write(prompt.encode("utf-8"))
        stdin.flush()
        stdin.seek(0)
        finished = run_command(
            command(program, settings),
            shell=False,
            cwd=workdir,
            env=env,
            timeout=settings.timeout,
            output_limit=STDERR_LIMIT,
            should_stop=should_stop,
            stdin=stdin,
            stdout=stdout,
        )
        stdout.seek(0)
        output = stdout.read(OUTPUT_LIMIT + 1)
    return _answer(program, finished, output)


def _answer(program: str, finished: Finished, output: bytes) -> str:
    if finished.stopped is not None:
        raise TransientClaudeError(
            f"claude stopped ({finished.stopped}) after {finished.duration_ms:.0f}ms"
        )
    stderr = finished.stderr.text()
    if len(output) > OUTPUT_LIMIT:
        raise PermanentError(f"claude printed more than {OUTPUT_LIMIT} bytes of JSON")
    try:
        answer = json.loads(output)
    except (json.JSONDecodeError, UnicodeDecodeError):
        unknown = UNKNOWN_OPTION.search(stderr)
        if unknown:
            raise PermanentError(
                f"{program} does not know the option {unknown.group(1)} that jobcore needs to "
                "confine it: upgrade Claude Code (@anthropic-ai/claude-code 2.1 or later)"
            ) from None
        raise TransientClaudeError(
            f"claude exited {finished.exit_code} without JSON output; stderr: "
            + scrub(stderr, os.environ.get("ANTHROPIC_API_KEY"))[-500:]
        ) from None
    if not isinstance(answer, dict):
        raise TransientClaudeError(f"claude printed JSON that is not an object: {answer!r:.200}")
    if answer.get("is_error") or finished.exit_code != 0:
        status = answer.get("api_error_status")
        # a gateway may quote the key (the CLI inherits ANTHROPIC_API_KEY) back in its error
        result = redact(str(answer.get("result")), os.environ.get("ANTHROPIC_API_KEY"))
        text = f"claude failed (status {status}): {result}"
        if isinstance(status, int) and not retryable_status(status):
            raise PermanentError(text)
        raise TransientClaudeError(text)
    if answer.get("num_turns") == 0:  # answered by the CLI itself, not by the model
        raise PermanentError(
            "Claude Code did not send the prompt to the model (a prompt starting with "
            f"'/name' is read as a slash command): {str(answer.get('result'))[:200]}; "
            "start the prompt differently or use the api backend"
        )
    return str(answer.get("result", ""))
