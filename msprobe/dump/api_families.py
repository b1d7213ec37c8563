"""The table of API families the dump records (prefix, namespace, capture technique, exclusions).

Behaviour is data: the tracer and the patcher iterate over :data:`FAMILIES`; no code branches on an
API name. Which names of each family are recorded comes from ``support_wrap_ops.yaml`` (packaged next
to this module, user-editable; ``MSPROBE_API_LIST`` may point to another file of the same format),
and for the discovering families (functional, tensor, torch) also from the namespace itself: every
public function in no list is recorded unless :data:`DENY` or the yaml's ``deny:`` section names it.
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
    # Public functions of the namespace that are in no list are recorded too, unless :data:`DENY`
    # (or the yaml's ``deny:`` section) names them: new torch APIs never vanish silently.
    discover: bool = False
    # Discovered plain Python functions defined in the namespace that call torch without
    # ``__torch_function__`` (``F.grouped_mm``) are patched while dumping is on.
    patch_python: bool = False


FAMILIES: tuple[ApiFamily, ...] = (
    # Functional before Torch: F.conv2d *is* torch.conv2d, and nn modules call the F name.
    ApiFamily(
        "functional", "Functional", "torch.nn.functional", FUNCTION_MODE, discover=True, patch_python=True
    ),
    ApiFamily("tensor", "Tensor", "torch.Tensor", FUNCTION_MODE, patch_dunders=True, discover=True),
    ApiFamily("torch", "Torch", "torch", FUNCTION_MODE, discover=True),
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

DENY_KEY = "deny"  # yaml section of ``family.name`` entries never recorded (added to DENY)

_SHAPE = "a shape/layout query: returns Python numbers, not tensor data"
_DTYPE = "a dtype/device/kind query: returns a bool or a Python value"
_AUTOGRAD = "autograd plumbing: changes no data (recording it would also hide what it calls)"
_MEMORY = "storage/memory plumbing: no tensor computation"
_EXPORT = "converts out of torch (Python or NumPy values), not a tensor op"
_QUANT = "a quantization parameter query"
_SYM = "symbolic-shape helper for tracing, not a tensor op"
_UPSTREAM = "upstream 8.1.1 leaves it out: a metadata-only reshape called everywhere (reshape is recorded)"

# Names never recorded, listed or discovered, with the reason. None of upstream 8.1.1's list is here.
# dtype/device/kind queries that both torch and Tensor offer
_KIND_QUERIES = (
    "get_device",
    "is_complex",
    "is_conj",
    "is_floating_point",
    "is_inference",
    "is_neg",
    "is_nonzero",
    "is_signed",
    "is_distributed",
)

_QUANT_QUERIES = (
    "q_per_channel_axis",
    "q_per_channel_scales",
    "q_per_channel_zero_points",
    "q_scale",
    "q_zero_point",
)

#: Collectives that return a handle and write their tensors when it completes: the record's output is
#: taken once the caller has waited for it.
WRITTEN_LATER: dict[str, str] = {
    "irecv": "receives into its tensor after it returns",
    "batch_isend_irecv": "its receives write their tensors after it returns",
}
#: Collectives that return a handle but only read their tensors: their output is recorded at once.
READ_ONLY_COLLECTIVES: dict[str, str] = {"isend": "sends its tensor, writes nothing"}

#: torch APIs that may write into their arguments although their names do not say so (no trailing
#: ``_``, no ``__i...__``), or whose write cannot be pinned to one tensor, matched as a part of the API's
#: name (``batch_norm`` also names ``native_batch_norm``): after such a call the dump forgets what it
#: remembers of every argument.
WRITES_UNNAMED: dict[str, str] = {
    "batch_norm": "updates its running statistics in training, without a version bump",
    "instance_norm": "updates its running statistics when it uses the input's",
    "embedding": "renormalises the weight's rows in place when max_norm is given",
    "backward": "accumulates into the .grad of the leaves",
    "resize": "resizes its argument's storage",
}
#: The same, matched by the whole name.
WRITES_UNNAMED_EXACT: dict[str, str] = {
    "grad": "torch.autograd.grad runs a backward pass, whose hooks may write",
    "set_": "points its tensor at other memory: not one write to one tensor",
}

DENY: dict[str, str] = {
    "tensor.__getitem__": "indexing is not in 8.1.1's list; recording it floods the dump with views",
    "tensor.__repr__": "printing a tensor is not an API call of the model",
    "tensor.__format__": "printing a tensor is not an API call of the model",
    **{
        f"tensor.{n}": _SHAPE
        for n in (
            "size",
            "dim",
            "ndimension",
            "nelement",
            "numel",
            "element_size",
            "dim_order",
            "dense_dim",
            "sparse_dim",
            "storage_offset",
            "is_contiguous",
            "is_same_size",
            "is_set_to",
            "is_coalesced",
        )
    },
    **{f"tensor.{n}": _DTYPE for n in (*_KIND_QUERIES, "is_pinned", "is_shared", "type", "qscheme")},
    **{
        f"tensor.{n}": _AUTOGRAD
        for n in (
            "backward",
            "register_hook",
            "register_post_accumulate_grad_hook",
            "retain_grad",
            "requires_grad_",
            "detach",
            "detach_",
        )
    },
    **{
        f"tensor.{n}": _MEMORY
        for n in (
            "data_ptr",
            "const_data_ptr",
            "storage",
            "untyped_storage",
            "storage_type",
            "pin_memory",
            "share_memory_",
            "record_stream",
            "module_load",
        )
    },
    **{f"tensor.{n}": _EXPORT for n in ("item", "tolist", "numpy")},
    **{f"tensor.{n}": _QUANT for n in _QUANT_QUERIES},
    **{f"tensor.{n}": _UPSTREAM for n in ("view",)},
    **{f"torch.{n}": _SHAPE for n in ("numel", "is_same_size")},
    **{f"torch.{n}": _DTYPE for n in _KIND_QUERIES},
    **{f"torch.{n}": _AUTOGRAD for n in ("detach", "autocast")},
    **{f"torch.{n}": _QUANT for n in _QUANT_QUERIES},
    **{
        f"torch.{n}": _SYM
        for n in (
            "sym_float",
            "sym_int",
            "sym_sqrt",
            "sym_ite",
            "sym_max",
            "sym_min",
            "sym_not",
            "sym_sum",
        )
    },
    "torch.allclose": "returns a Python bool, not a tensor",
    "functional.assert_int_or_pair": "an argument check, not a tensor op",
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
    """Each family's listed names, less the denied; under :data:`DENY_KEY` every denied
    ``family.name`` (:data:`DENY` plus the yaml's ``deny:`` entries), for discovery to skip."""
    path = path or api_list_path()
    lists = read_api_list(path, {f.key for f in FAMILIES}, frozenset({"aten", DENY_KEY}))
    denied = set(DENY)
    for entry in lists.pop(DENY_KEY, []):
        if "." not in entry:
            raise MsprobeError(f"{path}: deny entry {entry!r} must be 'family.name'")
        denied.add(entry)
    out = {key: [n for n in names if f"{key}.{n}" not in denied] for key, names in lists.items()}
    out[DENY_KEY] = sorted(denied)
    return out
