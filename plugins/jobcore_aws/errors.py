"""Classifying AWS failures: throttling, a busy resource, 5xx and network trouble retry; other
4xx are permanent."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    InvalidRegionError,
    NoCredentialsError,
    NoRegionError,
    ParamValidationError,
    PartialCredentialsError,
)

from jobcore import PermanentError

T = TypeVar("T")

THROTTLING = {
    "Throttling",
    "ThrottlingException",
    "ThrottledException",
    "RequestThrottled",
    "RequestThrottledException",
    "TooManyRequestsException",
    "RequestLimitExceeded",
    "ProvisionedThroughputExceededException",
    "SlowDown",
    "PriorRequestNotComplete",
    "TransactionInProgressException",
    "RequestTimeout",
    "RequestTimeoutException",
}
# the resource is busy with another operation, or a name is not yet free again: retried too
BUSY = {
    "OperationAborted",  # S3: a conflicting operation on the bucket is in progress
    "ResourceInUseException",  # DynamoDB: the table is being created, updated or deleted
    "TooManyUpdates",  # SSM: another change to the parameter is in progress
    "ConcurrentAccessException",  # SNS: another tag operation on the topic
    "AWS.SimpleQueueService.QueueDeletedRecently",  # SQS: the name is free 60s after a delete
    "QueueDeletedRecently",
}


class AwsTransientError(Exception):
    """Throttling, a busy resource, a 5xx or a network failure: retried with backoff."""


def error_code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def http_status(exc: ClientError) -> int:
    return int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)


@contextmanager
def classified(what: str) -> Iterator[None]:
    """Translate boto errors raised inside into retryable or permanent ones, naming `what`."""
    try:
        yield
    except ClientError as exc:
        code, status = error_code(exc), http_status(exc)
        message = exc.response.get("Error", {}).get("Message", "") or str(exc)
        text = f"{what}: {code or status}: {message}"
        if code in THROTTLING or code in BUSY or status >= 500 or status == 429:
            raise AwsTransientError(text) from None
        raise PermanentError(text) from None
    except (NoCredentialsError, PartialCredentialsError, NoRegionError) as exc:
        raise PermanentError(f"{what}: {exc}; configure AWS credentials and region") from None
    except (ParamValidationError, InvalidRegionError) as exc:  # refused before any request
        raise PermanentError(f"{what}: {exc}") from None
    except BotoCoreError as exc:  # endpoint unreachable, timeouts, broken responses
        raise AwsTransientError(f"{what}: {exc}") from None


def exists_on(codes: frozenset[str] | set[str], call: Callable[[], T]) -> T | None:
    """`call()` (a create), or None when it fails with one of `codes`: the resource already
    exists and is ours (another job created it since we looked), so the caller converges it."""
    try:
        return call()
    except ClientError as exc:
        if error_code(exc) in codes:
            return None
        raise


def absent_on(codes: frozenset[str] | set[str], call: Callable[[], T]) -> T | None:
    """`call()`, or None when it fails with one of `codes` (the resource does not exist)."""
    try:
        return call()
    except ClientError as exc:
        if error_code(exc) in codes or (http_status(exc) == 404 and "404" in codes):
            return None
        raise
