"""Python ``IntEnum`` views of the C enums, generated from the compiled header.

Nothing here is written by hand: each enum takes the constants of one C enum
type and drops their common prefix (``LQ_FORM_LEASE`` -> ``Form.LEASE``).
"""

from enum import IntEnum
from typing import Type

from libqueue._ffi import ffi

__all__ = ["Status", "Form", "Role", "Isolation", "Stat", "LogLevel", "Option", "OptionType"]


def _from_c(name: str, c_type: str, prefix: str) -> Type[IntEnum]:
    elements = ffi.typeof(c_type).relements  # {"LQ_FORM_LEASE": 2, ...}
    members = sorted(((k[len(prefix):], v) for k, v in elements.items()), key=lambda kv: kv[1])
    return IntEnum(name, members, module=__name__)  # type: ignore[return-value]


Status = _from_c("Status", "lq_status", "LQ_")
Form = _from_c("Form", "lq_form", "LQ_FORM_")
Role = _from_c("Role", "lq_role", "LQ_ROLE_")
Isolation = _from_c("Isolation", "lq_isolation", "LQ_ISOLATION_")
Stat = _from_c("Stat", "lq_stat", "LQ_STAT_")
LogLevel = _from_c("LogLevel", "lq_log_level", "LQ_LOG_")
Option = _from_c("Option", "lq_option", "LQ_OPT_")
OptionType = _from_c("OptionType", "lq_option_type", "LQ_OPTION_")
