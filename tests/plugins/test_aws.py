"""aws plugin: sync_aws against moto's server mode over real HTTP on 127.0.0.1."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import SimpleNamespace
from typing import Any

import boto3
import jobcore_aws
import pytest
from moto.server import ThreadedMotoServer
from testenv import LocalHTTPServer

from jobcore import InvalidPayload, Queue
from jobcore.testing import drain

MakeQueue = Callable[..., Queue]
REGION = "eu-west-1"


@pytest.fixture(scope="module")
def endpoint() -> Iterator[str]:
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture(autouse=True)
def credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(name, "testing")
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    monkeypatch.delenv("AWS_PROFILE", raising=False)


@pytest.fixture
def queue(jobcore_make_queue: MakeQueue, endpoint: str) -> Queue:
    return jobcore_make_queue(
        jobcore_aws, plugin_settings={"aws": {"endpoint_url": endpoint, "region": REGION}}
    )


def aws(service: str, endpoint: str) -> Any:
    return boto3.client(service, endpoint_url=endpoint, region_name=REGION)


def sync(
    queue: Queue, resource_type: str, resource_id: str, action: str = "upsert", **config: Any
) -> dict[str, Any]:
    payload = {
        "resource_type": resource_type,
        "resource_id": resource_id,
        "action": action,
        "config": config,
    }
    job = queue.enqueue("sync_aws", payload).job
    drain(queue)
    return queue.get(job.id).to_json()


def changes(job: dict[str, Any]) -> list[str]:
    assert job["status"] == "completed", job["last_error"]
    return list(job["result"]["changes"])


def test_s3_bucket_converges_and_is_idempotent(queue: Queue, endpoint: str) -> None:
    s3 = aws("s3", endpoint)
    assert changes(
        sync(queue, "s3_bucket", "jc-bucket", tags={"team": "core"}, versioning=True)
    ) == ["created bucket", "set tags", "versioning enabled"]
    assert (
        changes(sync(queue, "s3_bucket", "jc-bucket", tags={"team": "core"}, versioning=True)) == []
    )
    assert s3.get_bucket_versioning(Bucket="jc-bucket")["Status"] == "Enabled"
    assert changes(
        sync(queue, "s3_bucket", "jc-bucket", tags={"team": "ops"}, versioning=False)
    ) == ["set tags", "versioning suspended"]
    assert s3.get_bucket_tagging(Bucket="jc-bucket")["TagSet"] == [{"Key": "team", "Value": "ops"}]
    assert changes(sync(queue, "s3_bucket", "jc-bucket", "delete")) == ["deleted bucket"]
    assert changes(sync(queue, "s3_bucket", "jc-bucket", "delete")) == []  # absent: still a success


def test_non_empty_bucket_delete_fails_permanently(queue: Queue, endpoint: str) -> None:
    s3 = aws("s3", endpoint)
    s3.create_bucket(Bucket="jc-full", CreateBucketConfiguration={"LocationConstraint": REGION})
    s3.put_object(Bucket="jc-full", Key="k", Body=b"x")
    job = sync(queue, "s3_bucket", "jc-full", "delete")
    assert (
        job["status"] == "failed" and job["attempts"] == 1 and "BucketNotEmpty" in job["last_error"]
    )


def test_sqs_queue(queue: Queue, endpoint: str) -> None:
    sqs = aws("sqs", endpoint)
    assert changes(
        sync(queue, "sqs_queue", "jc-q", attributes={"VisibilityTimeout": "45"}, tags={"a": "1"})
    ) == ["created queue"]
    assert (
        changes(
            sync(
                queue, "sqs_queue", "jc-q", attributes={"VisibilityTimeout": "45"}, tags={"a": "1"}
            )
        )
        == []
    )
    assert changes(
        sync(queue, "sqs_queue", "jc-q", attributes={"VisibilityTimeout": "60"}, tags={"b": "2"})
    ) == ["set attributes ['VisibilityTimeout']", "set tags"]
    url = sqs.get_queue_url(QueueName="jc-q")["QueueUrl"]
    assert sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["VisibilityTimeout"])[
        "Attributes"
    ] == {"VisibilityTimeout": "60"}
    assert sqs.list_queue_tags(QueueUrl=url)["Tags"] == {"b": "2"}
    assert changes(sync(queue, "sqs_queue", "jc-q", "delete")) == ["deleted queue"]
    assert changes(sync(queue, "sqs_queue", "jc-q", "delete")) == []


def test_sns_topic(queue: Queue, endpoint: str) -> None:
    assert changes(
        sync(
            queue,
            "sns_topic",
            "jc-topic",
            attributes={"DisplayName": "Alerts"},
            tags={"env": "test"},
        )
    ) == ["created topic"]
    assert (
        changes(
            sync(
                queue,
                "sns_topic",
                "jc-topic",
                attributes={"DisplayName": "Alerts"},
                tags={"env": "test"},
            )
        )
        == []
    )
    assert changes(
        sync(
            queue,
            "sns_topic",
            "jc-topic",
            attributes={"DisplayName": "Pager"},
            tags={"env": "test"},
        )
    ) == ["set attribute DisplayName"]
    assert changes(sync(queue, "sns_topic", "jc-topic", "delete")) == ["deleted topic"]
    assert changes(sync(queue, "sns_topic", "jc-topic", "delete")) == []


def test_ssm_parameter(queue: Queue, endpoint: str) -> None:
    ssm = aws("ssm", endpoint)
    assert changes(
        sync(queue, "ssm_parameter", "/jc/db-url", value="postgres://a", type="SecureString")
    ) == ["created parameter"]
    assert (
        changes(
            sync(queue, "ssm_parameter", "/jc/db-url", value="postgres://a", type="SecureString")
        )
        == []
    )
    assert changes(
        sync(queue, "ssm_parameter", "/jc/db-url", value="postgres://b", type="SecureString")
    ) == ["updated parameter"]
    assert (
        ssm.get_parameter(Name="/jc/db-url", WithDecryption=True)["Parameter"]["Value"]
        == "postgres://b"
    )
    assert changes(sync(queue, "ssm_parameter", "/jc/db-url", "delete")) == ["deleted parameter"]
    assert changes(sync(queue, "ssm_parameter", "/jc/db-url", "delete")) == []


def test_dynamodb_table(queue: Queue, endpoint: str) -> None:
    config = {
        "key_schema": [{"AttributeName": "id", "KeyType": "HASH"}],
        "attribute_definitions": [{"AttributeName": "id", "AttributeType": "S"}],
    }
    assert changes(sync(queue, "dynamodb_table", "jc-table", **config)) == ["created table"]
    assert changes(sync(queue, "dynamodb_table", "jc-table", **config)) == []
    provisioned = {
        **config,
        "billing_mode": "PROVISIONED",
        "provisioned_throughput": {"ReadCapacityUnits": 2, "WriteCapacityUnits": 3},
    }
    assert changes(sync(queue, "dynamodb_table", "jc-table", **provisioned)) == [
        "billing mode PROVISIONED"
    ]
    other_key = {
        **config,
        "key_schema": [{"AttributeName": "pk", "KeyType": "HASH"}],
        "attribute_definitions": [{"AttributeName": "pk", "AttributeType": "S"}],
    }
    job = sync(queue, "dynamodb_table", "jc-table", **other_key)
    assert (
        job["status"] == "failed"
        and job["attempts"] == 1
        and "cannot be changed in place" in job["last_error"]
    )
    assert changes(sync(queue, "dynamodb_table", "jc-table", "delete")) == ["deleted table"]
    assert changes(sync(queue, "dynamodb_table", "jc-table", "delete")) == []


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        ({"resource_type": "ec2_instance", "resource_id": "x"}, "resource_type"),
        (
            {"resource_type": "s3_bucket", "resource_id": "x", "config": {"tags": {"a": 1}}},
            r"config for s3_bucket: tags\.a",
        ),
        (
            {"resource_type": "s3_bucket", "resource_id": "x", "config": {"acl": "public"}},
            "acl: unknown field",
        ),
        (
            {"resource_type": "ssm_parameter", "resource_id": "x", "config": {}},
            "value: Field required",
        ),
        (
            {
                "resource_type": "dynamodb_table",
                "resource_id": "t",
                "config": {
                    "key_schema": [{"AttributeName": "id", "KeyType": "HASH"}],
                    "attribute_definitions": [{"AttributeName": "other", "AttributeType": "S"}],
                },
            },
            "no attribute_definitions",
        ),
        ({"resource_type": "s3_bucket", "resource_id": "x", "action": "destroy"}, "action"),
    ],
)
def test_bad_payloads_are_rejected_at_enqueue(
    queue: Queue, payload: dict[str, Any], message: str
) -> None:
    with pytest.raises(InvalidPayload, match=message):
        queue.enqueue("sync_aws", payload)


def test_invalid_name_fails_permanently(queue: Queue) -> None:
    job = sync(queue, "s3_bucket", "X")  # bucket names are 3-63 lowercase characters
    assert (
        job["status"] == "failed"
        and job["attempts"] == 1
        and "InvalidBucketName" in job["last_error"]
    )


def test_unreachable_endpoint_is_retried(jobcore_make_queue: MakeQueue) -> None:
    queue = jobcore_make_queue(
        jobcore_aws,
        plugin_settings={"aws": {"endpoint_url": "http://127.0.0.1:9", "region": REGION}},
    )
    job = sync(queue, "sqs_queue", "jc-unreachable")
    assert job["status"] == "failed" and job["attempts"] == 5
    assert all("Could not connect" in entry["error"] for entry in job["errors"])


def test_reconcile_checks_existence(queue: Queue, endpoint: str) -> None:
    sync(queue, "sqs_queue", "jc-keep")
    sync(queue, "ssm_parameter", "/jc/gone", value="v")
    sync(queue, "sqs_queue", "jc-removed", "delete")
    assert [p for _, p in queue.reconcile()] == []
    aws("ssm", endpoint).delete_parameter(Name="/jc/gone")
    aws("sqs", endpoint).create_queue(QueueName="jc-removed")
    found = sorted(p for _, problems in queue.reconcile() for p in problems)
    assert found == ["sqs_queue jc-removed exists again", "ssm_parameter /jc/gone is missing"]


class FlakyProxy:
    """Forwards to moto over HTTP, but first answers with scripted AWS errors."""

    def __init__(self, target: str) -> None:
        import http.client
        from http.server import BaseHTTPRequestHandler
        from urllib.parse import urlsplit

        self.failures: list[tuple[int, str]] = []
        proxy = self
        host, port = urlsplit(target).hostname, urlsplit(target).port

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                if proxy.failures:
                    status, code = proxy.failures.pop(0)
                    reply = json.dumps({"__type": code, "message": "injected by the test"}).encode()
                    self.send_response(status)
                    self.send_header("content-type", "application/x-amz-json-1.1")
                    self.send_header("content-length", str(len(reply)))
                    self.end_headers()
                    self.wfile.write(reply)
                    return
                upstream = http.client.HTTPConnection(host, port, timeout=30)
                upstream.request("POST", self.path, body, dict(self.headers))
                answer = upstream.getresponse()
                data = answer.read()
                self.send_response(answer.status)
                for key, value in answer.getheaders():
                    if key.lower() not in ("transfer-encoding", "connection", "content-length"):
                        self.send_header(key, value)
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                upstream.close()

        self.http = LocalHTTPServer(Handler)
        self.url = self.http.url

    def close(self) -> None:
        self.http.close()


def test_throttling_and_server_errors_are_retried(
    jobcore_make_queue: MakeQueue, endpoint: str
) -> None:
    proxy = FlakyProxy(endpoint)
    try:
        proxy.failures = [(400, "ThrottlingException"), (500, "InternalServerError")]
        queue = jobcore_make_queue(
            jobcore_aws, plugin_settings={"aws": {"endpoint_url": proxy.url, "region": REGION}}
        )
        job = sync(queue, "ssm_parameter", "/jc/flaky", value="v")
        assert job["status"] == "completed" and job["attempts"] == 3
        assert "ThrottlingException" in job["errors"][0]["error"]
        assert "InternalServerError" in job["errors"][1]["error"]
        proxy.failures = [(400, "ValidationException")]
        job = sync(queue, "ssm_parameter", "/jc/flaky2", value="v")
        assert job["status"] == "failed" and job["attempts"] == 1
    finally:
        proxy.close()


def test_an_upsert_leaves_out_tags_and_keeps_them(queue: Queue, endpoint: str) -> None:
    """Issue 22 item 8: a field left out is left alone; only `tags: {}` clears them."""
    kept = {"cost-center": "42", "owner": "ops"}
    s3 = aws("s3", endpoint)
    s3.create_bucket(Bucket="jc-tagged", CreateBucketConfiguration={"LocationConstraint": REGION})
    tag_set = [{"Key": k, "Value": v} for k, v in kept.items()]
    s3.put_bucket_tagging(Bucket="jc-tagged", Tagging={"TagSet": tag_set})
    assert changes(sync(queue, "s3_bucket", "jc-tagged", versioning=True)) == ["versioning enabled"]
    bucket_tags = s3.get_bucket_tagging(Bucket="jc-tagged")["TagSet"]
    assert {t["Key"]: t["Value"] for t in bucket_tags} == kept

    sqs = aws("sqs", endpoint)
    url = sqs.create_queue(QueueName="jc-tagged", tags=kept)["QueueUrl"]
    assert changes(sync(queue, "sqs_queue", "jc-tagged", attributes={"DelaySeconds": "5"})) == [
        "set attributes ['DelaySeconds']"
    ]
    assert sqs.list_queue_tags(QueueUrl=url)["Tags"] == kept

    sns = aws("sns", endpoint)
    arn = sns.create_topic(Name="jc-tagged", Tags=tag_set)["TopicArn"]
    assert changes(sync(queue, "sns_topic", "jc-tagged", attributes={"DisplayName": "A"})) == [
        "set attribute DisplayName"
    ]
    topic_tags = sns.list_tags_for_resource(ResourceArn=arn)["Tags"]
    assert {t["Key"]: t["Value"] for t in topic_tags} == kept

    assert changes(sync(queue, "sqs_queue", "jc-tagged", tags={})) == ["set tags"]
    assert sqs.list_queue_tags(QueueUrl=url).get("Tags", {}) == {}
    assert changes(sync(queue, "s3_bucket", "jc-tagged", tags={})) == ["set tags"]


def test_the_stored_config_holds_only_what_was_given(queue: Queue) -> None:
    job = queue.enqueue(
        "sync_aws", {"resource_type": "sqs_queue", "resource_id": "q", "config": {"tags": {}}}
    ).job
    assert job.payload["config"] == {"tags": {}}


def test_a_bucket_name_boto_refuses_is_refused_at_enqueue(queue: Queue) -> None:
    with pytest.raises(InvalidPayload, match=r"resource_id.*not a valid S3 bucket name"):
        queue.enqueue("sync_aws", {"resource_type": "s3_bucket", "resource_id": "a b/c"})


def test_a_parameter_boto_refuses_fails_permanently_at_once(queue: Queue) -> None:
    """Issue 22 item 16: botocore's ParamValidationError is no transient error."""
    job = sync(
        queue,
        "dynamodb_table",
        "jc-param",
        key_schema=[{"AttributeName": "", "KeyType": "HASH"}],
        attribute_definitions=[{"AttributeName": "", "AttributeType": "S"}],
    )
    assert job["status"] == "failed" and job["attempts"] == 1, job["errors"]
    assert "Parameter validation failed" in job["last_error"]


def plugin_client(service: str, endpoint: str) -> Any:
    """The cached boto3 client the plugin's jobs use for this endpoint (same cache key)."""
    from jobcore_aws.clients import client
    from jobcore_aws.models import AwsSettings

    return client(service, AwsSettings(endpoint_url=endpoint, region=REGION))


@contextmanager
def before_call(
    service: str,
    endpoint: str,
    operation: str,
    act: Callable[[], object] = lambda: None,
    answer: tuple[Any, dict[str, Any]] | None = None,
) -> Iterator[None]:
    """Run `act` once, just before the plugin's client sends `operation`: e.g. another job
    creating the resource between the plugin's look-up and its create (a deterministic race).
    With `answer` (http response, parsed), that call gets it instead of the emulator's."""
    done: list[bool] = []

    def hook(**_: Any) -> Any:
        if done:
            return None
        done.append(True)
        act()
        return answer

    events = plugin_client(service, endpoint).meta.events
    event = f"before-call.{service}.{operation}"
    events.register(event, hook, unique_id="jc-test-before-call")
    try:
        yield
    finally:
        events.unregister(event, unique_id="jc-test-before-call")
    assert done, f"{operation} was never called"


def test_ssm_upsert_without_type_keeps_the_parameter_type(queue: Queue, endpoint: str) -> None:
    """A SecureString stays one when `type` is left out; only an explicit type changes it."""
    ssm = aws("ssm", endpoint)
    ssm.put_parameter(Name="/jc/secret", Value="hunter2", Type="SecureString")
    job = sync(queue, "ssm_parameter", "/jc/secret", value="rotated")
    assert changes(job) == ["updated parameter"] and job["payload"]["config"] == {
        "value": "rotated"
    }
    found = ssm.get_parameter(Name="/jc/secret", WithDecryption=True)["Parameter"]
    assert (found["Type"], found["Value"]) == ("SecureString", "rotated")
    assert changes(sync(queue, "ssm_parameter", "/jc/secret", value="rotated")) == []
    assert changes(sync(queue, "ssm_parameter", "/jc/secret", value="rotated", type="String")) == [
        "updated parameter"
    ]
    assert ssm.get_parameter(Name="/jc/secret")["Parameter"]["Type"] == "String"
    assert changes(sync(queue, "ssm_parameter", "/jc/new", value="v")) == ["created parameter"]
    assert ssm.get_parameter(Name="/jc/new")["Parameter"]["Type"] == "String"  # create's default


def test_dynamodb_upsert_without_billing_mode_keeps_it(queue: Queue, endpoint: str) -> None:
    ddb = aws("dynamodb", endpoint)
    keys = {
        "key_schema": [{"AttributeName": "id", "KeyType": "HASH"}],
        "attribute_definitions": [{"AttributeName": "id", "AttributeType": "S"}],
    }
    ddb.create_table(
        TableName="jc-provisioned",
        KeySchema=keys["key_schema"],
        AttributeDefinitions=keys["attribute_definitions"],
        BillingMode="PROVISIONED",
        ProvisionedThroughput={"ReadCapacityUnits": 5, "WriteCapacityUnits": 5},
    )
    assert changes(sync(queue, "dynamodb_table", "jc-provisioned", **keys)) == []
    table = ddb.describe_table(TableName="jc-provisioned")["Table"]
    assert table["BillingModeSummary"]["BillingMode"] == "PROVISIONED"
    assert table["ProvisionedThroughput"]["ReadCapacityUnits"] == 5
    assert changes(sync(queue, "dynamodb_table", "jc-on-demand", **keys)) == ["created table"]
    table = ddb.describe_table(TableName="jc-on-demand")["Table"]
    assert table["BillingModeSummary"]["BillingMode"] == "PAY_PER_REQUEST"  # create's default


def test_a_bucket_made_since_the_check_is_converged(queue: Queue, endpoint: str) -> None:
    s3 = aws("s3", endpoint)

    def other_job() -> None:
        s3.create_bucket(Bucket="jc-race", CreateBucketConfiguration={"LocationConstraint": REGION})

    with before_call("s3", endpoint, "CreateBucket", other_job):
        job = sync(queue, "s3_bucket", "jc-race", tags={"a": "1"}, versioning=True)
    assert job["attempts"] == 1 and changes(job) == ["set tags", "versioning enabled"]
    assert s3.get_bucket_tagging(Bucket="jc-race")["TagSet"] == [{"Key": "a", "Value": "1"}]


def test_a_table_made_since_the_check_is_converged(queue: Queue, endpoint: str) -> None:
    ddb = aws("dynamodb", endpoint)
    keys = {
        "key_schema": [{"AttributeName": "id", "KeyType": "HASH"}],
        "attribute_definitions": [{"AttributeName": "id", "AttributeType": "S"}],
    }

    def other_job() -> None:
        ddb.create_table(
            TableName="jc-race",
            KeySchema=keys["key_schema"],
            AttributeDefinitions=keys["attribute_definitions"],
            BillingMode="PROVISIONED",
            ProvisionedThroughput={"ReadCapacityUnits": 1, "WriteCapacityUnits": 1},
        )

    with before_call("dynamodb", endpoint, "CreateTable", other_job):
        job = sync(queue, "dynamodb_table", "jc-race", **keys, billing_mode="PAY_PER_REQUEST")
    assert job["attempts"] == 1 and changes(job) == ["billing mode PAY_PER_REQUEST"]
    table = ddb.describe_table(TableName="jc-race")["Table"]
    assert table["BillingModeSummary"]["BillingMode"] == "PAY_PER_REQUEST"


def test_a_queue_made_since_the_check_is_converged(queue: Queue, endpoint: str) -> None:
    sqs = aws("sqs", endpoint)

    def other_job() -> None:
        sqs.create_queue(
            QueueName="jc-race", Attributes={"VisibilityTimeout": "30"}, tags={"x": "y"}
        )

    with before_call("sqs", endpoint, "CreateQueue", other_job):
        job = sync(
            queue, "sqs_queue", "jc-race", attributes={"VisibilityTimeout": "45"}, tags={"a": "1"}
        )
    assert job["attempts"] == 1
    assert changes(job) == ["set attributes ['VisibilityTimeout']", "set tags"]
    url = sqs.get_queue_url(QueueName="jc-race")["QueueUrl"]
    assert sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["VisibilityTimeout"])[
        "Attributes"
    ] == {"VisibilityTimeout": "45"}
    assert sqs.list_queue_tags(QueueUrl=url)["Tags"] == {"a": "1"}


def test_a_topic_made_since_the_check_is_converged(queue: Queue, endpoint: str) -> None:
    sns = aws("sns", endpoint)

    def other_job() -> None:
        sns.create_topic(Name="jc-race")

    with before_call("sns", endpoint, "CreateTopic", other_job):
        job = sync(
            queue, "sns_topic", "jc-race", attributes={"DisplayName": "Race"}, tags={"a": "1"}
        )
    # CreateTopic answers with the existing topic's ARN and leaves it as it was
    assert job["attempts"] == 1
    assert changes(job) == ["created topic", "set attribute DisplayName", "set tags"]
    arn = sns.create_topic(Name="jc-race")["TopicArn"]
    assert sns.get_topic_attributes(TopicArn=arn)["Attributes"]["DisplayName"] == "Race"
    assert sns.list_tags_for_resource(ResourceArn=arn)["Tags"] == [{"Key": "a", "Value": "1"}]


def test_a_secure_string_made_since_the_check_is_not_downgraded(
    queue: Queue, endpoint: str
) -> None:
    ssm = aws("ssm", endpoint)

    def other_job() -> None:
        ssm.put_parameter(Name="/jc/race", Value="first", Type="SecureString")

    with before_call("ssm", endpoint, "PutParameter", other_job):
        job = sync(queue, "ssm_parameter", "/jc/race", value="second")
    assert job["attempts"] == 1 and changes(job) == ["updated parameter"]
    found = ssm.get_parameter(Name="/jc/race", WithDecryption=True)["Parameter"]
    assert (found["Type"], found["Value"]) == ("SecureString", "second")


@pytest.mark.parametrize(
    ("resource_type", "name", "operation", "delete"),
    [
        (
            "s3_bucket",
            "jc-gone",
            "DeleteBucket",
            lambda e: aws("s3", e).delete_bucket(Bucket="jc-gone"),
        ),
        (
            "sqs_queue",
            "jc-gone",
            "DeleteQueue",
            lambda e: aws("sqs", e).delete_queue(
                QueueUrl=aws("sqs", e).get_queue_url(QueueName="jc-gone")["QueueUrl"]
            ),
        ),
    ],
)
def test_a_resource_deleted_since_the_check_is_a_success(
    queue: Queue,
    endpoint: str,
    resource_type: str,
    name: str,
    operation: str,
    delete: Callable[[str], Any],
) -> None:
    assert changes(sync(queue, resource_type, name))[0].startswith("created")
    service = resource_type.split("_")[0]
    with before_call(service, endpoint, operation, lambda: delete(endpoint)):
        job = sync(queue, resource_type, name, "delete")
    assert job["attempts"] == 1 and changes(job) == []


@pytest.mark.parametrize(
    ("resource_type", "name", "config", "code"),
    [
        (
            "dynamodb_table",
            "jc-busy",
            {
                "key_schema": [{"AttributeName": "id", "KeyType": "HASH"}],
                "attribute_definitions": [{"AttributeName": "id", "AttributeType": "S"}],
            },
            "ResourceInUseException",
        ),
        ("ssm_parameter", "/jc/busy", {"value": "v"}, "TooManyUpdates"),
        ("sqs_queue", "jc-busy", {}, "AWS.SimpleQueueService.QueueDeletedRecently"),
    ],
)
def test_a_busy_resource_is_retried(
    jobcore_make_queue: MakeQueue,
    endpoint: str,
    resource_type: str,
    name: str,
    config: dict[str, Any],
    code: str,
) -> None:
    proxy = FlakyProxy(endpoint)
    try:
        proxy.failures = [(400, code)]
        queue = jobcore_make_queue(
            jobcore_aws, plugin_settings={"aws": {"endpoint_url": proxy.url, "region": REGION}}
        )
        job = sync(queue, resource_type, name, **config)
        assert job["status"] == "completed" and job["attempts"] == 2, job["errors"]
        assert code in job["errors"][0]["error"]
    finally:
        proxy.close()


def test_a_conflicting_bucket_operation_is_retried(queue: Queue, endpoint: str) -> None:
    # the emulator never answers OperationAborted: the first CreateBucket gets S3's answer
    answer = {
        "Error": {"Code": "OperationAborted", "Message": "A conflicting conditional operation"},
        "ResponseMetadata": {"HTTPStatusCode": 409},
    }
    with before_call(
        "s3", endpoint, "CreateBucket", answer=(SimpleNamespace(status_code=409), answer)
    ):
        job = sync(queue, "s3_bucket", "jc-aborted")
    assert job["status"] == "completed" and job["attempts"] == 2, job["errors"]
    assert "OperationAborted" in job["errors"][0]["error"]


LONG_KEY, LONG_VALUE = "k" * 129, "v" * 257


@pytest.mark.parametrize("resource_type", ["s3_bucket", "sqs_queue", "sns_topic"])
@pytest.mark.parametrize(
    ("tags", "message"),
    [
        ({"aws:owner": "x"}, r"tags: tag key 'aws:owner' starts with 'aws:'.*choose a key without"),
        ({"AWS:Owner": "x"}, r"tags: tag key 'AWS:Owner' starts with 'aws:'"),
        ({LONG_KEY: "x"}, r"tags: tag key 'k+…' has 129 characters; shorten it to 128"),
        ({"k": LONG_VALUE}, r"tags: the value of tag 'k' has 257 characters; shorten it to 256"),
        ({"": "x"}, r"tags: a tag key is empty"),
        ({f"k{i}": "v" for i in range(51)}, r"tags: 51 tags given; AWS allows at most 50"),
    ],
)
def test_tags_aws_refuses_are_refused_at_enqueue(
    queue: Queue, endpoint: str, resource_type: str, tags: dict[str, str], message: str
) -> None:
    """Before, S3 created the bucket and then refused the tags: a failed job that changed AWS."""
    payload = {
        "resource_type": resource_type,
        "resource_id": "jc-badtags",
        "config": {"tags": tags},
    }
    with pytest.raises(InvalidPayload, match=rf"config for {resource_type}: {message}"):
        queue.enqueue("sync_aws", payload)
    assert "jc-badtags" not in [b["Name"] for b in aws("s3", endpoint).list_buckets()["Buckets"]]


def test_tags_at_the_limits_are_accepted(queue: Queue) -> None:
    tags = {"k" * 128: "v" * 256, "empty": "", **{f"k{i}": "v" for i in range(48)}}
    for resource_type in ("s3_bucket", "sqs_queue", "sns_topic"):
        config = {"tags": tags}
        job = queue.enqueue(
            "sync_aws", {"resource_type": resource_type, "resource_id": "jc-ok", "config": config}
        ).job
        assert job.payload["config"] == config
