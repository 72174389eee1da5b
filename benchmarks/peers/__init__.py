"""Peer job queues on PostgreSQL, each measured by its own module in a subprocess.

Every module here runs as `python -m benchmarks.peers.NAME ACTION DSN SCHEMA [ARGS]`
and prints one JSON line on stdout; `benchmarks.pg_peers` runs them. They import only
the standard library and their own peer, so Oban's module runs in its own
Python 3.12 environment.
"""
