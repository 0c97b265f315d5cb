"""Argument errors say what is allowed, in words (issue 28, item 12): pydantic's wording ("String should match
pattern '^[a-z]...'", "Input should be a valid number") never reaches an agent."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import pytest
from pydantic import BaseModel, Field, ValidationError

from services.gateway.arg_errors import problem
from services.gateway.params import Kind, Tags, Unit


class Args(BaseModel):
    kind: Kind = "note"
    importance: Unit = 0.5
    content: Annotated[str, Field(min_length=1, max_length=10)] = "x"
    tags: Tags = []
    limit: Annotated[int, Field(ge=1, le=500)] = 10
    mode: Literal["hybrid", "semantic", "keyword"] = "hybrid"
    flag: bool = False


def said(**args: Any) -> str:
    with pytest.raises(ValidationError) as err:
        Args.model_validate(args)
    (e,) = err.value.errors()
    return problem(dict(e))


@pytest.mark.parametrize(
    ("args", "words"),
    [
        ({"kind": "Bad Kind"}, "must start with a lowercase letter and hold only lowercase letters, digits"),
        ({"importance": float("nan")}, "must be a finite number"),
        ({"importance": "Infinity"}, "must be a finite number"),
        ({"importance": None}, "must be a finite number, not null"),
        ({"importance": 2}, "must be at most 1.0"),
        ({"importance": "high"}, "must be a number"),
        ({"content": ""}, "must not be empty"),
        ({"content": "x" * 11}, "must be at most 10 characters (got 11)"),
        ({"tags": ["t"] * 51}, "must hold at most 50 items"),
        ({"tags": "one"}, "must be a list"),
        ({"limit": 0}, "must be at least 1"),
        ({"limit": "ten"}, "must be an integer"),
        ({"mode": "fuzzy"}, "must be one of 'hybrid', 'semantic' or 'keyword'"),
        ({"flag": "maybe"}, "must be true or false"),
    ],
)
def test_each_problem_is_said_in_words(args: dict[str, Any], words: str) -> None:
    got = said(**args)
    assert got.startswith(words), got
    for pydantic_wording in ("should", "Input", "String", "valid number", "^["):
        assert pydantic_wording not in got, got
