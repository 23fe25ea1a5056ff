"""Models built from values the core has already validated, without validating them again (pure).

A pydantic model validates every field it is given: right for input from outside, wasted on
what the core assembles from its own state (a Dispatch from a placed job, a JobStarted from a
Dispatch, a journal record from an event already validated). `Trusted(Model)` makes such
models directly: the same `__dict__` (every field, in the model's order, defaults filled),
the same fields-set, so they equal, dump and serialise as the validated ones do. It checks
only that no field is missing or unknown, and refuses a model with validators of its own
(they may compute what a trusted build would skip). tests/domain/test_trusted.py holds it to that, and
the property tests validate every command a run emits.

pydantic's own `model_construct` does the same, but costs more than validating (8.9 against
4.2 µs a Dispatch, timed here); this costs about four fifths of validating (28k against 36k
instructions a Dispatch, counted with valgrind's callgrind). The journal decoder's
`_journal_record` (domain/codec.py) is the same build written out for its three fields: on
replay's path per record, where this generic one costs 15.5k instructions against its 8.5k.
"""

from __future__ import annotations

from typing import Any, Generic, TypeVar

from pydantic import BaseModel

__all__ = ["Trusted"]

M = TypeVar("M", bound=BaseModel)

_MISSING: Any = object()
_new = object.__new__
_set = object.__setattr__


class Trusted(Generic[M]):
    """Builds instances of one model from trusted values: `Trusted(Dispatch)(job=..., ...)`."""

    __slots__ = ("_model", "_required", "_template")

    def __init__(self, model: type[M]) -> None:
        decorators = model.__pydantic_decorators__
        if decorators.model_validators or decorators.field_validators:
            raise TypeError(f"{model.__name__}: its validators compute or check what this skips")
        template: dict[str, Any] = {}
        for name, info in model.model_fields.items():
            if info.default_factory is not None:
                raise TypeError(f"{model.__name__}.{name}: a default factory is not supported")
            template[name] = _MISSING if info.is_required() else info.default
        self._model = model
        self._template = template
        self._required = frozenset(name for name, value in template.items() if value is _MISSING)

    def __call__(self, **values: Any) -> M:
        data = self._template.copy()
        data.update(values)
        if len(data) != len(self._template) or not values.keys() >= self._required:
            unknown = sorted(set(data) - set(self._template))
            missing = sorted(self._required - values.keys())
            raise TypeError(
                f"{self._model.__name__}: unknown fields {unknown}, missing fields {missing}"
            )
        model = _new(self._model)
        _set(model, "__dict__", data)
        _set(model, "__pydantic_fields_set__", set(values))
        _set(model, "__pydantic_extra__", None)
        _set(model, "__pydantic_private__", None)
        return model
