"""An error that crossed from a projector to a gateway is rebuilt as the class of its code, so the gateway's
`except ProjectionLag` (status polls fall back to the state as it stands) and `except MemoryNotFound` catch it
as they would in process; its code, message, field and details are those sent."""

from __future__ import annotations

import pytest

from mneme.errors import InvalidInput, MemoryNotFound, MnemeError, ProjectionLag, from_dict


@pytest.mark.parametrize(
    ("sent", "cls"),
    [
        (ProjectionLag("not yet", details={"applied_seq": 3, "min_seq": 9}), ProjectionLag),
        (MemoryNotFound("m-1"), MemoryNotFound),
        (InvalidInput("limit", "must be at most 100"), InvalidInput),
    ],
)
def test_an_error_is_rebuilt_as_its_class(sent: MnemeError, cls: type[MnemeError]) -> None:
    got = from_dict(sent.to_dict())
    assert type(got) is cls
    assert got.to_dict() == sent.to_dict()


def test_an_unknown_code_stays_a_plain_error_with_that_code() -> None:
    got = from_dict({"code": "SOMETHING_NEW", "message": "from a newer projector"})
    assert type(got) is MnemeError and got.code == "SOMETHING_NEW" and got.message == "from a newer projector"
