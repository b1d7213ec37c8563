"""Exception types of the dump front door, with upstream 8.1.1's classes and message prefixes.

All are :class:`msprobe.errors.MsprobeError` subclasses, so the CLI prints them as one line. Unlike
upstream (which logs the detail and raises with an *empty* detail), the detail is always in the
message: ``str(exc)`` = upstream prefix + the field, the wrong value and the allowed values.
"""

from __future__ import annotations

from typing import ClassVar

from msprobe.errors import MsprobeError


class MsprobeException(MsprobeError):
    """Upstream's ``MsprobeException(code, detail)``: ``str()`` = fixed prefix + detail."""

    INVALID_PARAM_ERROR = 0
    INTERFACE_USAGE_ERROR = 1
    RECURSION_LIMIT_ERROR = 2

    PREFIXES: ClassVar[dict[int, str]] = {
        INVALID_PARAM_ERROR: "[msprobe] 无效参数：",
        INTERFACE_USAGE_ERROR: "[msprobe] Invalid interface usage: ",
        RECURSION_LIMIT_ERROR: "[msprobe] 递归调用超过限制：",
    }

    def __init__(self, code: int, detail: str = "") -> None:
        self.code = code
        self.detail = detail
        super().__init__(self.PREFIXES.get(code, "[msprobe] ") + detail)


class ScopeException(MsprobeError):
    """Upstream's scope/list validation error."""

    InvalidScope = 0
    InvalidApiList = 1
    ScopeConflict = 2

    PREFIXES: ClassVar[dict[int, str]] = {
        InvalidScope: "[msprobe] Invalid scope: ",
        InvalidApiList: "[msprobe] Invalid api_list: ",
        ScopeConflict: "[msprobe] Scope and api_list conflict: ",
    }

    def __init__(self, code: int, detail: str = "") -> None:
        self.code = code
        self.detail = detail
        super().__init__(self.PREFIXES.get(code, "[msprobe] ") + detail)


class FileCheckException(MsprobeError):
    """A path that fails the file checks (missing, symlink, bad characters, not writable...)."""

    def __init__(self, detail: str) -> None:
        self.detail = detail
        super().__init__("[msprobe] 非法文件路径：" + detail)
