"""`StorageContract`: the conformance suite every storage backend must pass.

Subclass it in a test module and provide a `storage_factory` fixture: a
callable `storage_factory(clock=None) -> Storage`. Within one test every call
returns a NEW handle (as another process would open) on the SAME store, which
the first call creates empty and migrated; `clock` (ms UTC) replaces the
store's clock for that handle. Close the handles at teardown::

    class TestMyBackend(StorageContract):
        @pytest.fixture
        def storage_factory(self, tmp_path):
            made = []
            def factory(clock=None):
                made.append(MyBackend(dsn, clock=clock))
                return made[-1]
            yield factory
            for storage in made:
                storage.close()

Optional backend hooks (each test needing one is skipped without it):
`app_connection` (an `AppConnection`: the application's own driver
connection to the same store, for the outbox and for holding the write lock)
and `busy_storage` (a handle whose writes give up quickly while another
connection holds the write lock).

The hub's state (`hub_store()`) and the optional powers a backend declares
(`jobcore.storage.powers`) are checked too (`HubStateRules`);
docs/storage-backends.md lists what a backend implements.

Every rule of `jobcore.transitions` is checked, and recorded rows are
compared with `transitions.apply`, so a backend cannot re-derive the rules
differently. Time comes from the injected clock: the suite never sleeps to
make time pass.
"""

from __future__ import annotations

from jobcore.testing.contract.base import (
    HOUR,
    LEASE,
    T0,
    AppConnection,
    FakeClock,
    StorageFactory,
    lease_of,
    new_job,
)
from jobcore.testing.contract.claims import ClaimRules
from jobcore.testing.contract.hub_state import HubStateRules
from jobcore.testing.contract.operators import OperatorRules
from jobcore.testing.contract.outcomes import OutcomeRules
from jobcore.testing.contract.sweep import SweepAndEventRules


class StorageContract(ClaimRules, OutcomeRules, SweepAndEventRules, OperatorRules, HubStateRules):
    """Conformance tests; subclasses provide the `storage_factory` fixture."""


__all__ = [
    "HOUR",
    "LEASE",
    "T0",
    "AppConnection",
    "FakeClock",
    "StorageContract",
    "StorageFactory",
    "lease_of",
    "new_job",
]
