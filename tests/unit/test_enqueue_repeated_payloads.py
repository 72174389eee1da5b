"""A batch repeating one payload object validates it once, only when that changes nothing:
each job still gets its own payload, every hook and type callback still runs per job, and
a model that runs its own code (a default factory, a validator, an override) is asked per
item; the answer rows of a batch are what `new_row` builds one by one."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, Field, computed_field, field_validator, model_validator

from jobcore import JobType, Queue, hookimpl
from jobcore.errors import InvalidPayload, PayloadTooLarge
from jobcore.models import JobStatus, NewJob
from jobcore.payload_codec import codec_for
from jobcore.storage.rows import inserted_rows, new_row
from jobcore.testing import make_queue

_counter = itertools.count()


class Plain(BaseModel):
    n: int = 0
    text: str = ""


class Factory(BaseModel):
    n: int = 0
    serial: int = Field(default_factory=lambda: next(_counter))


class Validated(BaseModel):
    n: int = 0

    @field_validator("n")
    @classmethod
    def count(cls, value: int) -> int:
        return value + 1


class Nested(BaseModel):
    tags: list[str] = []
    inner: dict[str, int] = {}


class Overridden(BaseModel):
    n: int = 0

    @classmethod
    def model_validate(cls, obj: Any, **kwargs: Any) -> Overridden:
        return super().model_validate({**obj, "n": obj.get("n", 0) * 10}, **kwargs)

    def model_dump(self, **kwargs: Any) -> dict[str, Any]:
        return {**super().model_dump(**kwargs), "dumped": True}


class Types:
    """Job types over the models above; `check` and `idempotency_key` note each call."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    @hookimpl
    def jobcore_register_job_types(self, register: Callable[[JobType], None]) -> None:
        models: list[tuple[str, type[BaseModel]]] = [
            ("plain", Plain),
            ("factory", Factory),
            ("validated", Validated),
            ("nested", Nested),
            ("overridden", Overridden),
        ]
        for name, model in models:
            register(JobType(name=name, payload_model=model, handler=lambda payload, ctx: None))
        register(
            JobType(
                name="checked",
                payload_model=Plain,
                handler=lambda payload, ctx: None,
                check=lambda model, config: self.calls.append(f"check {model.n}"),
                idempotency_key=self.key,
            )
        )

    def key(self, model: Plain) -> str | None:
        self.calls.append(f"key {model.n}")
        return None


class MetaNote:
    def __init__(self) -> None:
        self.jobs: list[NewJob] = []

    @hookimpl
    def jobcore_enqueue_meta(self, job: NewJob) -> dict[str, Any]:
        self.jobs.append(job)
        job.payload["seen"] = len(self.jobs)  # a hostile hook changing the job it is shown
        return {"n": len(self.jobs)}


@pytest.fixture
def types() -> Types:
    return Types()


@pytest.fixture
def queue(tmp_path: Path, types: Types) -> Queue:
    return make_queue(tmp_path / "jobs.db", types)


def test_a_repeated_payload_gives_each_job_its_own_payload(queue: Queue) -> None:
    same = {"n": 3, "text": "x"}
    inserted = queue.enqueue_many("plain", [same] * 5 + [{"n": 4}] + [same] * 2, priority=2)
    payloads = [item.job.payload for item in inserted]
    assert (
        payloads
        == [{"n": 3, "text": "x"}] * 5 + [{"n": 4, "text": ""}] + [{"n": 3, "text": "x"}] * 2
    )
    assert len({id(payload) for payload in payloads}) == len(payloads)
    payloads[1]["n"] = 99
    assert [p["n"] for p in payloads[:5]] == [3, 99, 3, 3, 3]
    assert same == {"n": 3, "text": "x"}  # the caller's dict is left alone
    for item in inserted:
        assert queue.get(item.job.id).payload == item.job.payload or item.job.payload["n"] == 99
        assert item.job.priority == 2 and item.created


def test_meta_hooks_run_per_job_and_what_they_change_stays_in_that_job(tmp_path: Path) -> None:
    note = MetaNote()
    queue = make_queue(tmp_path / "jobs.db", note)
    same = {"sleep": 0.5}
    inserted = queue.enqueue_many("noop", (same,) * 4)
    assert len(note.jobs) == 4
    assert [item.job.meta for item in inserted] == [{"n": n} for n in range(1, 5)]
    # each job was shown its own payload: a change made to one is not in the others
    assert [item.job.payload["seen"] for item in inserted] == [1, 2, 3, 4]
    assert all(queue.get(item.job.id).payload == {"sleep": 0.5, "fail": False} for item in inserted)


@pytest.mark.parametrize("name", ["factory", "validated", "overridden"])
def test_a_model_running_its_own_code_is_asked_per_item(queue: Queue, name: str) -> None:
    same = {"n": 1}
    jobs = queue._build_each(name, [same] * 3, {})
    alone = [queue.build(name, same) for _ in range(3)]
    if name == "factory":  # a fresh default per job, as one by one
        serials = [job.payload["serial"] for job in jobs]
        assert len(set(serials)) == 3 and serials == sorted(serials)
    else:
        assert [job.payload for job in jobs] == [job.payload for job in alone]
    if name == "overridden":  # the model's own model_validate and model_dump ran
        assert jobs[0].payload == {"n": 10, "dumped": True}


def test_check_and_key_callbacks_run_for_every_repeated_item(queue: Queue, types: Types) -> None:
    queue.enqueue_many("checked", [{"n": 7}] * 3)
    assert types.calls == ["check 7", "key 7"] * 3


def test_a_repeated_nested_payload_shares_nothing_between_jobs(queue: Queue) -> None:
    same = {"tags": ["a"], "inner": {"k": 1}}
    jobs = queue._build_each("nested", [same] * 3, {})
    jobs[0].payload["tags"].append("b")
    jobs[1].payload["inner"]["k"] = 2
    assert [job.payload for job in jobs[1:]] == [
        {"tags": ["a"], "inner": {"k": 2}},
        {"tags": ["a"], "inner": {"k": 1}},
    ]


def test_a_repeated_bad_payload_is_named_at_its_first_item(queue: Queue, tmp_path: Path) -> None:
    bad = {"n": "many"}
    with pytest.raises(InvalidPayload, match=r"^item 2: invalid payload for 'plain': n"):
        queue.enqueue_many("plain", [{"n": 1}, bad, bad, bad])
    queue.config.core.max_payload_bytes = 20
    big = {"n": 1, "text": "x" * 30}
    with pytest.raises(PayloadTooLarge, match=r"^item 1: payload for 'plain' is \d+ bytes"):
        queue.enqueue_many("plain", [big, big])
    assert queue.list_jobs() == []


def test_a_repeated_payload_keeps_the_idempotency_key_given(queue: Queue) -> None:
    first = queue.enqueue_many("plain", [{"n": 1}] * 3, idempotency_key="k")
    assert [item.created for item in first] == [True, False, False]
    assert len({item.job.id for item in first}) == 1
    assert len(queue.list_jobs()) == 1


def test_purity_is_judged_from_the_models_schema() -> None:
    class Computed(BaseModel):
        n: int = 0

        @computed_field  # type: ignore[prop-decorator]
        @property
        def double(self) -> int:
            return self.n * 2

    class Checked(BaseModel):
        n: int = 0

        @model_validator(mode="after")
        def fine(self) -> Checked:
            return self

    class PostInit(BaseModel):
        n: int = 0

        def model_post_init(self, context: Any) -> None:
            pass

    assert codec_for(Plain).pure and codec_for(Nested).pure
    impure: list[type[BaseModel]] = [Factory, Validated, Overridden, Computed, Checked, PostInit]
    assert [model.__name__ for model in impure if codec_for(model).pure] == []
    assert codec_for(Plain).validate({"n": 2}) == Plain.model_validate({"n": 2})
    assert codec_for(Plain).dump(Plain(n=2)) == Plain(n=2).model_dump(mode="json")


def test_inserted_rows_are_the_rows_new_row_builds() -> None:
    def new_job(id: str, **fields: Any) -> NewJob:
        given: dict[str, Any] = {"type": "t", "queue": "q", "payload": {}, "priority": 0}
        given |= {"max_attempts": 3}
        given |= {"run_at": None, "timeout_ms": None, "idempotency_key": None}
        return NewJob(id=id, **(given | fields))

    jobs = [
        new_job("a", payload={"x": 1}, priority=1, meta={"m": 1}),
        new_job("b", timeout_ms=5, idempotency_key="k", parent_id="p", delay_ms=50),
        new_job("c", run_at=2_000),
    ]
    made = inserted_rows(jobs, 1_000)
    assert [item.job for item in made] == [new_row(job, 1_000) for job in jobs]
    assert [item.job.status for item in made] == [
        JobStatus.PENDING,
        JobStatus.SCHEDULED,
        JobStatus.SCHEDULED,
    ]
    assert all(item.created for item in made)
    assert made[0].job.meta is not jobs[0].meta
    given = inserted_rows(jobs, 1_000, run_at=900, status=JobStatus.PENDING)
    assert [item.job for item in given] == [
        new_row(job, 1_000, run_at=900, status=JobStatus.PENDING) for job in jobs
    ]
