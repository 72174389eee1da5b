"""boto3 clients, cached per service, endpoint and region (imported on first use)."""

from __future__ import annotations

import threading
from typing import Any

import boto3
from botocore.config import Config as BotoConfig

from jobcore_aws.errors import classified
from jobcore_aws.models import AwsSettings
from jobcore_aws.resources import RESOURCES

__all__ = ["RESOURCES", "classified", "client"]

# The queue retries (with backoff and a visible history), so boto3 does not.
_BOTO_CONFIG = BotoConfig(
    retries={"total_max_attempts": 1, "mode": "standard"}, connect_timeout=10, read_timeout=60
)
_clients: dict[tuple[str, str | None, str | None], Any] = {}
_clients_lock = threading.Lock()


def client(service: str, settings: AwsSettings) -> Any:
    """A cached boto3 client (clients are thread-safe) for this endpoint and region."""
    key = (service, settings.endpoint_url, settings.region)
    with _clients_lock:
        if key not in _clients:
            _clients[key] = boto3.session.Session().client(
                service,
                endpoint_url=settings.endpoint_url,
                region_name=settings.region,
                config=_BOTO_CONFIG,
            )
        return _clients[key]
