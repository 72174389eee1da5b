"""A second SIGTERM that arrives while the first one's log line is being written (DESIGN §6):
the worker's handler must not wait for the log lock its own thread holds (a hang for good,
with the keeper still extending every lease the worker holds)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent(
    """
    import io, logging, signal, sys, time
    from jobcore import signals
    from jobcore.logs import BatchedStreamHandler

    class SlowStream(io.StringIO):
        raised = False
        def write(self, text):
            if not SlowStream.raised:  # the second signal, in the middle of the first line
                SlowStream.raised = True
                signal.raise_signal(signal.SIGTERM)
            return super().write(text)

    stream = SlowStream()
    logger = logging.getLogger("jobcore")
    logger.addHandler(BatchedStreamHandler(stream))
    logger.setLevel(logging.INFO)
    asked = []
    signals.install(lambda graceful: asked.append(graceful), lambda: bool(asked), 30.0)
    signal.raise_signal(signal.SIGTERM)
    end = time.monotonic() + 10
    while len(asked) < 2 and time.monotonic() < end:  # the line may be written by another thread
        time.sleep(0.01)
    print(asked)
    """
)


def test_a_signal_during_the_handlers_own_log_line_does_not_hang() -> None:
    try:
        done = subprocess.run(
            [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=20
        )
    except subprocess.TimeoutExpired:
        raise AssertionError("the second signal's handler waited for good") from None
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[True, False]", done.stdout  # graceful, then now
