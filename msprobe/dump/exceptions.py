"""Exception types of the dump front door, with upstream 8.1.1's classes and message prefixes.

All are :class:`msprobe.errors.MsprobeError` subclasses, so the CLI prints them as one line. Unlike
upstream (which logs the detail and raises with an *empty* detail), the detail is always in the
message: ``str(exc)`` = upstream prefix + the field, the wrong value and the allowed values.
"""

from __future__ import annotations

from typing import Any, ClassVar

from msprobe.errors import MsprobeError


class _CodedException(MsprobeError):
    """``Cls(code, detail)``: ``str()`` = the class's fixed prefix for ``code`` + detail."""

    PREFIXES: ClassVar[dict[int, str]] = {}

    def __init__(self, code: int | str, detail: str = "") -> None:
        if isinstance(code, str):  # a whole message (torch rebuilds a DataLoader worker's error so)
            self.code, self.detail = -1, code
            super().__init__(code)
            return
        self.code = code
        self.detail = detail
        super().__init__(self.PREFIXES.get(code, "[msprobe] ") + detail)

    def __reduce__(self) -> tuple[Any, ...]:
        # rebuilt from (code, detail), not from the message: sent to another process (a Pool or
        # DataLoader worker's error) it keeps its message
        return (type(self), (self.code, self.detail) if self.code != -1 else (self.detail,))


class MsprobeException(_CodedException):
    """Upstream's ``MsprobeException(code, detail)``: ``str()`` = fixed prefix + detail."""

    INVALID_PARAM_ERROR = 0
    INTERFACE_USAGE_ERROR = 1
    RECURSION_LIMIT_ERROR = 2

    PREFIXES: ClassVar[dict[int, str]] = {
        INVALID_PARAM_ERROR: "[msprobe] 无效参数：",
        INTERFACE_USAGE_ERROR: "[msprobe] Invalid interface usage: ",
        RECURSION_LIMIT_ERROR: "[msprobe] 递归调用超过限制：",
    }


class ScopeException(_CodedException):
    """Upstream's scope/list validation error."""

    InvalidScope = 0
    InvalidApiList = 1
    ScopeConflict = 2

    PREFIXES: ClassVar[dict[int, str]] = {
        InvalidScope: "[msprobe] Invalid scope: ",
        InvalidApiList: "[msprobe] Invalid api_list: ",
        ScopeConflict: "[msprobe] Scope and api_list conflict: ",
    }


class FileCheckException(MsprobeError):
    """A path that fails the file checks (missing, symlink, bad characters, not writable...)."""

    def __init__(self, detail: str) -> None:
        self.detail = detail
        super().__init__("[msprobe] 非法文件路径：" + detail)

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.detail,))
