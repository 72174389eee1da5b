"""How a payload model validates and dumps payloads, looked at once per model class.

Building a job validates its payload against the type's model and dumps the model
as JSON values: the per-job part of every enqueue. `codec_for` finds, once per
model, the cheapest calls that do exactly what `model_validate` and
`model_dump(mode="json")` do, and whether the model is *pure*: validating and
dumping run no code of the model's own (no validators, default factories, custom
serializers, computed fields or `__init__`/`model_post_init`), so one payload
object validated twice gives equal results, and a batch may validate it once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel


@dataclass(frozen=True, slots=True)
class PayloadCodec:
    """`validate(payload)` is `model.model_validate(payload)`; `dump(instance)` is
    `instance.model_dump(mode="json")`; `pure`: see the module's docstring."""

    validate: Callable[[Any], BaseModel]
    dump: Callable[[BaseModel], Any]
    pure: bool


_codecs: dict[type[BaseModel], PayloadCodec] = {}
_CODECS_KEPT = 256  # models made on the fly (e.g. in tests) are let go of past this many


def codec_for(model: type[BaseModel]) -> PayloadCodec:
    """The codec of `model` (made at its first use)."""
    try:
        return _codecs[model]
    except KeyError:
        pass
    codec = _make_codec(model)
    if isinstance(getattr(model, "__pydantic_core_schema__", None), dict):
        if len(_codecs) >= _CODECS_KEPT:
            _codecs.clear()
        _codecs[model] = codec  # else a model completed later (a mock schema): ask again then
    return codec


def _make_codec(model: type[BaseModel]) -> PayloadCodec:
    validate: Callable[[Any], BaseModel] = model.model_validate
    dump: Callable[[BaseModel], Any] = _dump_json_values
    # pydantic's own methods only add keyword defaults around its core calls: call those
    # directly, unless the model overrides them (then its override is what runs)
    own_calls = (
        getattr(model.model_validate, "__func__", None) is _BASE_VALIDATE
        and model.model_dump is BaseModel.model_dump
    )
    schema = getattr(model, "__pydantic_core_schema__", None)
    if own_calls and isinstance(schema, dict):  # a model not fully defined has a mock
        validate = model.__pydantic_validator__.validate_python
        dump = _to_json_values(model)
    return PayloadCodec(validate=validate, dump=dump, pure=own_calls and _runs_no_code(schema))


_BASE_VALIDATE = vars(BaseModel)["model_validate"].__func__


def _dump_json_values(instance: BaseModel) -> Any:
    return instance.model_dump(mode="json")


def _to_json_values(model: type[BaseModel]) -> Callable[[BaseModel], Any]:
    """`instance.model_dump(mode="json")` for instances of `model`, as one core call."""
    to_python = model.__pydantic_serializer__.to_python

    def dump(instance: BaseModel) -> Any:
        return to_python(instance, mode="json")

    return dump


def _runs_no_code(schema: Any) -> bool:
    """True if validating and serializing with the core `schema` calls no Python code of the
    model's: no callable anywhere in it (validator and serializer functions, default
    factories, computed fields' properties), no `__init__` of its own and no post-init."""
    return isinstance(schema, dict) and not _runs_code(schema)


def _runs_code(value: Any) -> bool:
    """True if any part of the core schema `value` runs Python code (JSON Schema metadata,
    which only `model_json_schema` reads, skipped)."""
    if isinstance(value, dict):
        if value.get("custom_init") or value.get("post_init") or value.get("computed_fields"):
            return True
        return any(_runs_code(item) for key, item in value.items() if key != "metadata")
    if isinstance(value, list | tuple):
        return any(_runs_code(item) for item in value)
    return callable(value) and not isinstance(value, type)
