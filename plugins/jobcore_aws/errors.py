"""Classifying AWS failures: throttling, 5xx and network trouble retry; other 4xx are permanent."""

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


class AwsTransientError(Exception):
    """Throttling, a 5xx or a network failure: retried with backoff."""


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
        if code in THROTTLING or status >= 500 or status == 429:
            raise AwsTransientError(text) from None
        raise PermanentError(text) from None
    except (NoCredentialsError, PartialCredentialsError, NoRegionError) as exc:
        raise PermanentError(f"{what}: {exc}; configure AWS credentials and region") from None
    except (ParamValidationError, InvalidRegionError) as exc:  # refused before any request
        raise PermanentError(f"{what}: {exc}") from None
    except BotoCoreError as exc:  # endpoint unreachable, timeouts, broken responses
        raise AwsTransientError(f"{what}: {exc}") from None


def absent_on(codes: frozenset[str] | set[str], call: Callable[[], T]) -> T | None:
    """`call()`, or None when it fails with one of `codes` (the resource does not exist)."""
    try:
        return call()
    except ClientError as exc:
        if error_code(exc) in codes or (http_status(exc) == 404 and "404" in codes):
            return None
        raise
