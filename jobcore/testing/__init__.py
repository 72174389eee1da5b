"""Test kit for jobcore and its plugins (also a pytest plugin: `jobcore.testing.fixtures`).

* `HookRecorder` -- a plugin that records every lifecycle notification.
* `StorageContract` -- the conformance suite; subclass it and provide a
  `storage_factory(clock=None)` fixture (see `jobcore.testing.contract`).
* `make_queue`, `drain` -- build a Queue with exactly the plugins named, and
  run a worker until nothing runnable remains.
"""

from jobcore.testing.contract import StorageContract
from jobcore.testing.helpers import drain, make_config, make_queue
from jobcore.testing.recorder import HookRecorder

__all__ = ["HookRecorder", "StorageContract", "drain", "make_config", "make_queue"]
