#!/bin/sh
# The README's first command: a few real jobs through the `jobcore` command line.
# Enqueue them into the default database (./jobcore.db), drain them with one
# worker, then show what happened. Run it from the checkout with jobcore on PATH.
set -eu
mkdir -p first-run
rm -f first-run/.tried

echo "== enqueue: a file to write, a command to run, one that fails once, one that always fails"
jobcore enqueue create_file '{"path": "hello.txt", "content": "hello from jobcore\n"}'
jobcore enqueue shell '{"command": "uname -sr > first-run/kernel.txt"}'
jobcore enqueue shell '{"command": "if [ -e first-run/.tried ]; then echo ready; else touch first-run/.tried; echo not ready yet >&2; exit 75; fi"}'
jobcore enqueue shell '{"argv": ["ls", "first-run/no-such-folder"]}' --max-attempts 2

echo "== run: one worker until nothing is left to do (retries without waiting)"
jobcore run --until-empty --backoff-base 0s

echo "== stats"
jobcore stats

echo "== jobcore-files/hello.txt (create_file writes below the files root, ./jobcore-files by default)"
cat jobcore-files/hello.txt
echo "next: jobcore list, jobcore show ID, jobcore retry --failed"
