"""Executables cached by SHA-256, filled atomically and safely by concurrent agents.

An entry is `<dir>/artifacts/<sha256>`; it only ever appears complete and
verified: the download goes to a temporary file in the same folder, is
hashed while written, fsynced, made executable and renamed into place. A
lock file per entry (`fcntl.flock`) makes agents sharing the folder fetch an
entry once: the others wait and then find it there.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import re
import tempfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from jobcore.errors import PermanentError

log = logging.getLogger("jobcore.agent")

SHA256 = re.compile(r"^[0-9a-f]{64}$")
CHUNK = 1 << 16


class ChecksumMismatch(PermanentError):
    """The downloaded bytes do not hash to the expected SHA-256 (permanent)."""

    def __init__(self, expected: str, actual: str, source: str) -> None:
        super().__init__(
            f"solver_checksum_mismatch: {source} has sha256 {actual}, the payload expects "
            f"{expected}; fix the payload's sha256 or the file"
        )
        self.expected = expected
        self.actual = actual


def file_sha256(path: str | Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


Fetch = Callable[[], Iterable[bytes]]
"""Opens the source and yields its bytes (raises on download errors)."""


class ArtifactCache:
    """Verified executables by hash under `<directory>/artifacts`."""

    def __init__(self, directory: str | Path) -> None:
        self.root = Path(directory).expanduser().resolve() / "artifacts"  # the exe runs elsewhere
        self.downloads = 0  # fetches this process made (tests, logs)

    def path_for(self, sha256: str) -> Path:
        if not SHA256.match(sha256):
            raise ValueError(f"{sha256!r} is not a lowercase hex SHA-256 (64 characters)")
        return self.root / sha256

    def cached(self, sha256: str) -> Path | None:
        path = self.path_for(sha256)
        return path if path.is_file() else None

    def get(self, sha256: str, fetch: Fetch, *, source: str) -> Path:
        """The entry for `sha256`, fetching and verifying it first when missing."""
        path = self.path_for(sha256)
        if path.is_file():
            return path
        self.root.mkdir(parents=True, exist_ok=True)
        with self._locked(sha256):
            if path.is_file():  # another agent filled it while we waited
                return path
            self._fill(path, sha256, fetch, source)
        return path

    @contextlib.contextmanager
    def _locked(self, sha256: str) -> Iterator[None]:
        fd = os.open(self.root / f"{sha256}.lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing releases the lock

    def _fill(self, path: Path, sha256: str, fetch: Fetch, source: str) -> None:
        self.downloads += 1
        fd, tmp = tempfile.mkstemp(dir=self.root, prefix=f".{sha256}.", suffix=".part")
        try:
            digest = hashlib.sha256()
            with os.fdopen(fd, "wb") as handle:
                for chunk in fetch():
                    digest.update(chunk)
                    handle.write(chunk)
                handle.flush()
                os.fsync(handle.fileno())
            actual = digest.hexdigest()
            if actual != sha256:
                raise ChecksumMismatch(sha256, actual, source)
            os.chmod(tmp, 0o755)
            os.replace(tmp, path)
            tmp = ""
            log.info("cached %s from %s", sha256[:12], source)
        finally:
            if tmp:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(tmp)
