"""The table of API families the dump records (prefix, namespace, capture technique, exclusions).

Behaviour is data: the tracer and the patcher iterate over :data:`FAMILIES`; no code branches on an
API name. Which names of each family are recorded comes from ``support_wrap_ops.yaml`` (packaged next
to this module, user-editable; ``MSPROBE_API_LIST`` may point to another file of the same format).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from importlib import resources

from msprobe.errors import MsprobeError

FUNCTION_MODE = "function_mode"  # seen through a TorchFunctionMode: identity of the function is kept
PATCH = "patch"  # replaced by a wrapper (setattr): for bindings that may bypass __torch_function__


@dataclass(frozen=True)
class ApiFamily:
    key: str  # section of support_wrap_ops.yaml
    prefix: str  # record-name prefix
    namespace: str  # importable module path, or "torch.Tensor" for the Tensor methods
    technique: str
    requires: tuple[str, ...] = ()  # modules that must import for the family to exist
    note: str = ""
    # Names starting with "__" are patched on the class while dumping is on, whatever ``technique``
    # says: Python operators reach __torch_function__ under the *method's* name (``t + 1`` arrives
    # as ``Tensor.add``), so only a patched ``__add__`` can tell ``Tensor.__add__`` from ``Tensor.add``.
    patch_dunders: bool = False
    # Collectives work in place and may return a work handle: the record's ``output`` is the
    # arguments as they are after the call (async handles waited for first), as upstream.
    collective: bool = False


FAMILIES: tuple[ApiFamily, ...] = (
    # Functional before Torch: F.conv2d *is* torch.conv2d, and nn modules call the F name.
    ApiFamily("functional", "Functional", "torch.nn.functional", FUNCTION_MODE),
    ApiFamily("tensor", "Tensor", "torch.Tensor", FUNCTION_MODE, patch_dunders=True),
    ApiFamily("torch", "Torch", "torch", FUNCTION_MODE),
    ApiFamily("_VF", "VF", "torch._VF", FUNCTION_MODE),
    ApiFamily(
        "distributed",
        "Distributed",
        "torch.distributed",
        PATCH,
        collective=True,
        note="collectives run in C++ and return work handles; patched so kwargs and handles are seen",
    ),
    ApiFamily(
        "npu_distributed",
        "Distributed",
        "torch_npu.distributed",
        PATCH,
        requires=("torch_npu",),
        collective=True,
    ),
    ApiFamily(
        "torch_npu",
        "NPU",
        "torch_npu",
        PATCH,
        requires=("torch_npu",),
        note="NPU bindings may not honour __torch_function__, so they are patched",
    ),
    ApiFamily("mindspeed", "MindSpeed", "mindspeed.ops", PATCH, requires=("torch_npu", "mindspeed")),
)

# Names never recorded even if listed, with the reason (upstream 8.1.1 leaves them out too).
EXCLUDED: dict[str, str] = {
    "tensor.__getitem__": "indexing is not in 8.1.1's list; recording it floods the dump with views",
    "tensor.__repr__": "printing a tensor is not an API call of the model",
    "tensor.__format__": "printing a tensor is not an API call of the model",
}


def api_list_path(env_var: str = "MSPROBE_API_LIST", package: str = "msprobe.dump") -> str:
    """The file named by ``env_var``, else the ``support_wrap_ops.yaml`` packaged in ``package``."""
    env = os.environ.get(env_var)
    if env:
        return env
    return str(resources.files(package).joinpath("support_wrap_ops.yaml"))


def parse_api_list(text: str, where: str) -> dict[str, list[str]]:
    """Parse the ``family:`` / ``  - name`` subset of YAML used by support_wrap_ops.yaml."""
    out: dict[str, list[str]] = {}
    current: str | None = None
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].rstrip()
        if not line.strip():
            continue
        if not line[0].isspace():
            if not line.endswith(":") or " " in line[:-1]:
                raise MsprobeError(f"{where}:{lineno}: expected 'family:', got {raw.strip()!r}")
            current = line[:-1]
            out.setdefault(current, [])
            continue
        item = line.strip()
        if current is None or not item.startswith("- ") or not item[2:].strip():
            raise MsprobeError(
                f"{where}:{lineno}: expected '  - api_name' under a family, got {raw.strip()!r}"
            )
        out[current].append(item[2:].strip())
    return out


def read_api_list(path: str, known: set[str], unlisted: frozenset[str] = frozenset()) -> dict[str, list[str]]:
    """The API list at ``path`` (any framework): each family key one of ``known``, or of ``unlisted``
    (accepted, not named in the error)."""
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except OSError as exc:
        raise MsprobeError(f"{path}: cannot read the API list ({exc.strerror})") from None
    lists = parse_api_list(text, path)
    for key in lists:
        if key not in known and key not in unlisted:
            raise MsprobeError(f"{path}: unknown family {key!r}; known: {sorted(known)}")
    return lists


def load_api_list(path: str | None = None) -> dict[str, list[str]]:
    path = path or api_list_path()
    lists = read_api_list(path, {f.key for f in FAMILIES}, frozenset({"aten"}))
    return {key: [n for n in names if f"{key}.{n}" not in EXCLUDED] for key, names in lists.items()}
