"""The enums of the package are written out (for type checkers); each must
hold exactly the constants of its C enum type, with the values the compiled
header gives them."""

from __future__ import annotations

from enum import IntEnum
from typing import Dict, Type

import pytest

import libqueue
from libqueue import enums
from libqueue._ffi import ffi

#: Each enum, its C type and the prefix its members drop.
C_TYPES = {
    enums.Status: ("lq_status", "LQ_"),
    enums.Form: ("lq_form", "LQ_FORM_"),
    enums.Role: ("lq_role", "LQ_ROLE_"),
    enums.Isolation: ("lq_isolation", "LQ_ISOLATION_"),
    enums.Stat: ("lq_stat", "LQ_STAT_"),
    enums.LogLevel: ("lq_log_level", "LQ_LOG_"),
    enums.Option: ("lq_option", "LQ_OPT_"),
    enums.OptionType: ("lq_option_type", "LQ_OPTION_"),
}


def c_members(c_type: str, prefix: str) -> Dict[str, int]:
    elements = ffi.typeof(c_type).relements  # {"LQ_FORM_LEASE": 2, ...}
    assert all(name.startswith(prefix) for name in elements), (c_type, prefix)
    return {name[len(prefix):]: value for name, value in elements.items()}


@pytest.mark.parametrize("enum", list(C_TYPES), ids=lambda e: e.__name__)
def test_enum_matches_the_header(enum: Type[IntEnum]) -> None:
    c_type, prefix = C_TYPES[enum]
    assert {m.name: m.value for m in enum} == c_members(c_type, prefix)


def test_every_enum_is_checked() -> None:
    assert {e.__name__ for e in C_TYPES} == set(enums.__all__)
    for name in set(enums.__all__) & set(libqueue.__all__):
        assert getattr(libqueue, name) is getattr(enums, name)
