"""jobcore: a durable job queue on SQLite with pluggy plugins."""

from jobcore.async_queue import AsyncQueue
from jobcore.config import Config
from jobcore.context import JobContext
from jobcore.declare import job_type
from jobcore.errors import (
    ConfigError,
    IllegalTransition,
    Interrupted,
    InvalidPayload,
    JobcoreError,
    JobNotFound,
    JobTimeout,
    NotADatabase,
    PayloadTooLarge,
    PermanentError,
    PermanentStorageError,
    RetryAfter,
    SchemaTooNew,
    StorageBusy,
    StorageConnectionLost,
    StorageError,
    StorageFull,
    StorageIOError,
    StorageReadOnly,
    StorageUnavailable,
    TransientStorageError,
    UnknownJobType,
)
from jobcore.hookspecs import hookimpl
from jobcore.models import Job, JobStatus, NewJob
from jobcore.plugins import make_plugin_manager
from jobcore.queue import Queue
from jobcore.registry import JobType, Payload
from jobcore.retry import RetryDecision, RetryPolicy
from jobcore.storage.base import Inserted, StatsSection
from jobcore.worker import Worker

__version__ = "0.1.0"

__all__ = [
    "AsyncQueue",
    "Config",
    "ConfigError",
    "IllegalTransition",
    "Inserted",
    "Interrupted",
    "InvalidPayload",
    "Job",
    "JobContext",
    "JobNotFound",
    "JobStatus",
    "JobTimeout",
    "JobType",
    "JobcoreError",
    "NewJob",
    "NotADatabase",
    "Payload",
    "PayloadTooLarge",
    "PermanentError",
    "PermanentStorageError",
    "Queue",
    "RetryAfter",
    "RetryDecision",
    "RetryPolicy",
    "SchemaTooNew",
    "StatsSection",
    "StorageBusy",
    "StorageConnectionLost",
    "StorageError",
    "StorageFull",
    "StorageIOError",
    "StorageReadOnly",
    "StorageUnavailable",
    "TransientStorageError",
    "UnknownJobType",
    "Worker",
    "hookimpl",
    "job_type",
    "make_plugin_manager",
]
