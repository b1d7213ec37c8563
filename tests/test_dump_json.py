"""The dump.json contract: record names parse back to their parts, and the writer's files read back.

Names: generated names -> parts -> names for every reader of the grammar (dump, replay, routing,
fused-op lookup, compare rows, stack report). Files: a generated rank folder written by the dump's
:class:`RankStore` reads back through :mod:`msprobe.formats.dump_json` and replay's ``read_dump``
with the same records, stacks and parents, and ``rebuild`` from the journal gives the same bytes.
"""

from __future__ import annotations

import json
import re
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from msprobe.dump.pytorch import mutation
from msprobe.dump.writer import RankStore, rebuild
from msprobe.errors import MsprobeError
from msprobe.formats import dump_json
from msprobe.formats import record_names as rn
from msprobe.formats.jsonfmt import Summary
from msprobe.run_ut import npu_ops
from msprobe.run_ut.records import read_dump

MSPROBE = Path(__file__).parents[1] / "msprobe"

# API segments: identifiers that are not the direction words nor hold ``Module`` (replay's
# substring rules would read such names differently; see the quirk tests below).
segments = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,10}", fullmatch=True).filter(
    lambda s: not any(w in s for w in ("forward", "backward", "Module"))
)
replay_types = st.sampled_from(sorted(rn.REPLAY_TYPES))
all_prefixes = st.sampled_from([p.name for p in rn.API_PREFIXES] + ["my_custom"])
keys = st.from_regex(r"k_[a-z0-9]{0,5}", fullmatch=True)  # dict keys that are never 'dtype'/'shape'
indices = st.integers(0, 10**6)
directions = st.sampled_from(rn.DIRECTIONS)


# -- names ---------------------------------------------------------------------------------------------
@given(all_prefixes, segments, indices, directions)
def test_dump_view_name_parts_name(prefix: str, api: str, index: int, direction: str) -> None:
    name = rn.api_record_name(prefix, api, index, direction)
    parts = rn.parse_api_record_name(name)
    assert parts == (prefix, api, index, direction)
    assert rn.api_record_name(*parts) == name
    scope = next((p.scope for p in rn.API_PREFIXES if p.name == prefix), False)
    assert rn.is_scope_api_name(name) is scope
    assert not rn.is_scope_module_name(name)


@given(replay_types, st.lists(segments, min_size=1, max_size=2), indices, directions, st.integers(0, 99))
def test_replay_routing_compare_views(
    api_type: str, middle: list[str], index: int, direction: str, k: int
) -> None:
    """``Type.api.N`` and ``Type.prefix.api.N`` through every reader, and back."""
    api = ".".join(middle)
    full = f"{api_type}.{api}.{index}"
    record = rn.api_record_name(api_type, api, index, direction)
    assert rn.split_direction(record) == (full, direction)
    assert rn.strip_direction(record) == full
    assert not rn.is_module_key(record)
    assert (rn.replay_api_type(full), rn.replay_bare_name(full), rn.replay_grammar_ok(full)) == (
        api_type,
        api,
        True,
    )
    assert rn.drop_call_index(full) == f"{api_type}.{api}"
    assert rn.bare_name(full) == rn.bare_name(record) == api
    assert rn.split_op_name(record) == rn.split_op_name(full) == (api_type, api)
    row = rn.output_row_name(full, direction, k)
    assert rn.output_row_parts(row) == (full, api, direction)
    assert rn.output_row_api(row) == full
    assert rn.bare_name(row) == api
    # parts -> name
    row_full, _, row_direction = rn.output_row_parts(row) or ("", "", "")
    assert rn.output_row_name(row_full, row_direction, k) == row
    assert rn.api_record_name(api_type, rn.replay_bare_name(full), index, direction) == record


@pytest.mark.parametrize(
    ("api_type", "bare", "op"),
    [
        ("Tensor", "add_", "add_"),
        ("Torch", "linalg.inv", "inv"),
        ("Aten", "add_.Tensor", "add_"),  # the overload is not the op
        ("Aten", "mul", "mul"),
    ],
)
def test_replay_op_name_is_the_operator_not_an_aten_overload(api_type: str, bare: str, op: str) -> None:
    assert rn.replay_op_name(api_type, bare) == op


@given(
    st.lists(segments, min_size=1, max_size=3),
    segments,
    directions,
    indices,
    st.sampled_from([rn.MODULE, rn.CELL]),
)
def test_module_names(path: list[str], cls: str, direction: str, index: int, kind: str) -> None:
    name = rn.module_record_name(".".join(path), cls, direction, index, kind)
    assert name == f"{kind}.{'.'.join(path)}.{cls}.{direction}.{index}"
    assert rn.is_scope_module_name(name) and not rn.is_scope_api_name(name)
    assert rn.is_module_key(name) is (kind == rn.MODULE)  # replay skips Module records only
    forward = rn.module_record_name(".".join(path), cls, rn.FORWARD, index, kind)
    assert rn.module_backward_name(forward) == rn.module_record_name(
        ".".join(path), cls, rn.BACKWARD, index, kind
    )


@given(st.text(alphabet="a/%2F", max_size=8), st.text(alphabet="a/%2F", max_size=8))
def test_tensor_file_names_are_one_name_and_differ_for_different_records(a: str, b: str) -> None:
    """A '/' of a module's name is written %2F; a module named 'a%2Fb' must not share 'a/b''s file."""
    assert "/" not in rn.file_safe(a)
    assert (rn.file_safe(a) == rn.file_safe(b)) is (a == b)


def test_a_module_class_named_forward_keeps_its_name_in_the_backward_record() -> None:
    name = rn.module_record_name("f", "forward", rn.FORWARD, 0, rn.MODULE)
    assert rn.module_backward_name(name) == "Module.f.forward.backward.0"


@given(st.lists(st.one_of(st.integers(0, 9), segments), max_size=4), st.sampled_from(["input", "kwargs", ""]))
def test_tensor_file_names(path: list[int | str], side: str) -> None:
    name = rn.data_file_name("Torch.cat.0.forward", side, path)
    assert name == ".".join(["Torch.cat.0.forward", *([side] if side else []), *map(str, path)]) + ".pt"
    assert rn.data_file_name("x", side, path, ".npy").endswith(".npy")


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("Torch.x.0.forwardish", None),  # 'forward' occurs, last segment is not it
        # the last segment decides (8.1.1: 'forward' anywhere wins, so the backward record of
        # F.multi_head_attention_forward, which nn.MultiheadAttention calls, was malformed)
        ("Functional.forward_pre.0.backward", ("Functional.forward_pre.0", "backward")),
        (
            "Functional.multi_head_attention_forward.0.backward",
            ("Functional.multi_head_attention_forward.0", "backward"),
        ),
        ("forward", None),
        ("Tensor.add_.0.backward", ("Tensor.add_.0", "backward")),
    ],
)
def test_replay_direction_is_the_last_segment(name: str, expected: tuple[str, str] | None) -> None:
    assert rn.split_direction(name) == expected


@pytest.mark.parametrize(
    ("name", "replay_bare", "routing_bare", "op"),
    [
        ("Functional.linear.x", "linear", "Functional.linear.x", ("Functional", "linear.x")),  # no index
        ("Tensor.a.b.c.d", "Tensor.a.b.c.d", "Tensor.a.b.c.d", ("Tensor", "a.b.c.d")),  # 5 segments
        ("linear", "linear", "linear", (None, "linear")),
        ("NPU.npu_rms_norm.3.backward", "npu_rms_norm.3", "npu_rms_norm", ("NPU", "npu_rms_norm")),
    ],
)
def test_readers_differ_where_upstream_does(name: str, replay_bare: str, routing_bare: str, op: Any) -> None:
    assert rn.replay_bare_name(name) == replay_bare
    assert rn.bare_name(name) == routing_bare
    assert rn.split_op_name(name) == op


@given(
    st.lists(st.lists(st.sampled_from(["a", "b", "7", "", "forward"]), min_size=1, max_size=9).map(".".join))
)
def test_compare_rows_law(names: list[str]) -> None:
    """6 or 7 segments: (all but the last three, the segments between type and index, the direction)."""
    expected = [
        (".".join(p[:-3]), ".".join(p[1:-4]), p[-3]) if len(p := n.split(".")) in (6, 7) else None
        for n in names
    ]
    assert [rn.output_row_parts(n) for n in names] == expected
    valid, api, api_type, bare, direction = rn.output_rows_columns(names)
    assert valid == [e is not None for e in expected]
    assert list(zip(api, bare, direction)) == [e or ("", "", "") for e in expected]
    assert api_type == [e[0].split(".")[0] if e else "" for e in expected]


def test_compare_rows_are_valid_by_segment_count_only() -> None:
    assert rn.output_row_parts("Tensor.bad_name.forward.output.0") is None  # 5 segments
    assert rn.output_row_parts("a.b.c.d.e.f") == ("a.b.c", "b", "d")
    assert rn.output_row_api("Functional.x.0.forward.output.z") == "Functional.x.0.forward.output.z"


def test_prefix_table_views() -> None:
    names = [p.name for p in rn.API_PREFIXES]
    assert len(names) == len(set(names))
    assert {"Torch", "Tensor", "Functional", "VF", "Aten"} == rn.TORCH_PREFIXES
    assert rn.TORCH_PREFIXES <= rn.REPLAY_TYPES and set(rn.REPLAY_TYPES) <= set(rn.SCOPE_API_PREFIXES)
    assert rn.FUSED_PREFIXES == {rn.NPU_PREFIX, rn.MINDSPEED_PREFIX} <= rn.REPLAY_TYPES
    assert not rn.is_scope_api_name("MintDistributed.all_reduce.0.forward")
    assert mutation.TORCH_PREFIXES is rn.TORCH_PREFIXES
    assert npu_ops.lookup(f"{rn.MINDSPEED_PREFIX}.npu_fusion_attention.0") is not npu_ops.lookup(
        f"{rn.NPU_PREFIX}.npu_fusion_attention.0"
    )
    assert npu_ops.lookup("forward") is None and npu_ops.lookup("Functional.npu_rms_norm.0") is None


def test_name_regexes_live_in_one_module() -> None:
    home = MSPROBE / "formats" / "record_names.py"
    compiled = re.compile(r"re\.compile\(.*(forward|backward|Module|Cell|output)")
    elsewhere = [
        f"{path.relative_to(MSPROBE)}:{i}"
        for path in MSPROBE.rglob("*.py")
        if path != home
        for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if compiled.search(line)
    ]
    assert elsewhere == []
    assert len(compiled.findall(home.read_text(encoding="utf-8"))) >= 3


# -- files ---------------------------------------------------------------------------------------------
floats = st.floats(allow_nan=True, allow_infinity=True, width=32) | st.floats(-1e6, 1e6)
shapes = st.lists(st.integers(0, 64), max_size=4)


@st.composite
def tensors(draw: st.DrawFn, record: str) -> dict[str, Any]:
    stats = {k: draw(floats | st.none()) for k in ("Max", "Min", "Mean", "Norm")}
    fields = {"type": "torch.Tensor", "dtype": draw(st.sampled_from(["torch.float32", "torch.bfloat16"]))}
    fields |= {"shape": draw(shapes), **stats, "requires_grad": draw(st.booleans())}
    if draw(st.booleans()):
        fields["data_name"] = rn.data_file_name(record, "input", [draw(st.integers(0, 9))])
    return Summary(fields) if draw(st.booleans()) else fields


def scalars() -> st.SearchStrategy[Any]:
    return st.one_of(
        st.none(),
        st.builds(lambda v: {"type": "int", "value": v}, st.integers(-(2**40), 2**40)),
        st.builds(lambda v: {"type": "float", "value": v}, floats),
        st.builds(lambda v: {"type": "bool", "value": v}, st.booleans()),
        st.builds(lambda v: {"type": "str", "value": v}, st.text(max_size=6)),
    )


def args(record: str) -> st.SearchStrategy[Any]:
    leaf = tensors(record) | scalars()
    return st.recursive(
        leaf,
        lambda kids: st.lists(kids, max_size=3) | st.dictionaries(keys, kids, max_size=3),
        max_leaves=8,
    )


@st.composite
def rank_folders(draw: st.DrawFn) -> tuple[dict[str, Any], dict[str, Any], list[tuple[str, tuple[str, ...]]]]:
    header = {"task": draw(st.sampled_from(["statistics", "tensor"])), "level": "L1"}
    header |= {"framework": "pytorch", "dump_data_dir": draw(st.none() | st.just("/x/dump_tensor_data"))}
    call = st.tuples(
        replay_types, st.lists(segments, min_size=1, max_size=2).map(".".join), st.integers(0, 50)
    )
    calls = draw(st.lists(call, max_size=6, unique=True))
    data: dict[str, Any] = {}
    for prefix, api, index in calls:
        fwd = rn.api_record_name(prefix, api, index, rn.FORWARD)
        data[fwd] = {
            "input_args": draw(st.lists(args(fwd), max_size=3)),
            "input_kwargs": draw(st.dictionaries(keys, args(fwd), max_size=2)),
            "output": draw(st.lists(args(fwd), max_size=2)),
        }
        if draw(st.booleans()):
            bwd = rn.api_record_name(prefix, api, index, rn.BACKWARD)
            data[bwd] = {"input": draw(st.lists(args(bwd), max_size=2)), "output": draw(st.lists(args(bwd)))}
        if draw(st.booleans()):  # a module record between the API records: replay skips it
            data[rn.module_record_name("fc", "Linear", rn.FORWARD, index)] = {
                "input_args": [],
                "output": [None],
            }
    frames = st.lists(st.text(max_size=20), min_size=1, max_size=3).map(tuple)
    pool = [("File a.py, line 1, in f",), *draw(st.lists(frames, max_size=2))]  # names share stacks
    stacks = [(name, draw(st.sampled_from(pool))) for name in data]
    return header, data, stacks


def _text(obj: Any) -> str:
    return json.dumps(obj)  # order-sensitive, NaN as NaN: equal texts are equal documents


@settings(deadline=None, max_examples=60)
@given(rank_folders())
def test_rank_folder_round_trip(folder: tuple[dict[str, Any], dict[str, Any], list[Any]]) -> None:
    header, data, stacks = folder
    construct = {name: (None if i == 0 else list(data)[i - 1]) for i, name in enumerate(data)}
    with tempfile.TemporaryDirectory() as tmp:
        store = RankStore(tmp, dict(header))
        store.open(with_tensor_dir=False)
        try:
            for name, value in data.items():
                store.put(name, value)
                store.put_construct(name, construct[name])
            for name, frames in stacks:
                store.put_stack(name, frames)
            store.flush()
            rank = Path(tmp)
            files = {
                f: (rank / f).read_bytes()
                for f in (dump_json.DUMP_JSON, dump_json.STACK_JSON, dump_json.CONSTRUCT_JSON)
            }
            assert files[dump_json.DUMP_JSON].decode() == json.dumps({**header, "data": data}, indent=1)

            doc = dump_json.read_dump_json(rank / dump_json.DUMP_JSON)
            assert _text(doc) == _text({**header, "data": data})
            assert _text(dict(dump_json.read_construct(rank / dump_json.CONSTRUCT_JSON))) == _text(construct)
            grouped: dict[tuple[str, ...], list[str]] = {}
            for name, frames in stacks:
                grouped.setdefault(frames, []).append(name)
            assert dump_json.read_stack(rank / dump_json.STACK_JSON) == [
                (n, list(f)) for f, n in grouped.items()
            ]

            forwards = [n for n in data if n.endswith(".forward") and not n.startswith(rn.MODULE)]
            replayed = read_dump(rank / dump_json.DUMP_JSON).records
            assert [r.name for r in replayed] == [rn.strip_direction(n) for n in forwards]
            for record, key in zip(replayed, forwards, strict=True):
                assert record.problem is None
                assert _text(record.forward) == _text(data[key])
                backward = data.get(key[: -len(rn.FORWARD)] + rn.BACKWARD)
                assert _text(record.backward) == _text(backward)

            assert rebuild(tmp) == len(data)  # the journal holds the same records: same bytes
            assert {f: (rank / f).read_bytes() for f in files} == files
        finally:
            store.close()


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        (b"", "invalid JSON"),
        (b"  \n", "invalid JSON"),
        (b"\xef\xbb\xbf" + json.dumps({"data": {}}).encode(), "invalid JSON"),  # upstream writes no BOM
        (b"\xff\xfe{}", "invalid JSON"),
        (b"[]", "no 'data' object"),
        (b'{"data": []}', "no 'data' object"),
    ],
)
def test_not_a_dump_is_one_line_naming_the_file(tmp_path: Path, raw: bytes, why: str) -> None:
    path = tmp_path / dump_json.DUMP_JSON
    path.write_bytes(raw)
    with pytest.raises(MsprobeError, match=rf"^{re.escape(str(path))}: not a dump \({why}"):
        dump_json.read_dump_json(path)


def test_missing_and_folder_dumps(tmp_path: Path) -> None:
    with pytest.raises(MsprobeError, match="no such file"):
        dump_json.read_dump_json(tmp_path / "absent.json")
    with pytest.raises(MsprobeError, match="is a folder"):
        dump_json.read_dump_json(tmp_path)


def test_empty_header_and_empty_data_layout() -> None:
    assert dump_json.dump_json_text({}, []) == json.dumps({"data": {}}, indent=1)
    pairs = [("Torch.a.0.forward", dump_json.encode_record({"output": [1.5]}))]
    assert dump_json.dump_json_text({"task": "x"}, pairs) == json.dumps(
        {"task": "x", "data": {"Torch.a.0.forward": {"output": [1.5]}}}, indent=1
    )


def test_stack_and_construct_readers_refuse_other_files(tmp_path: Path) -> None:
    bad = tmp_path / "stack.json"
    bad.write_bytes(b"\xef\xbb\xbf{}")
    with pytest.raises(MsprobeError, match=r"unreadable stack\.json"):
        dump_json.read_stack(bad)
    assert dump_json.parse_stack({"Torch.c.0.forward": ["f"]}, bad) == [(["Torch.c.0.forward"], ["f"])]
    with pytest.raises(MsprobeError, match=r"entry '0' has no list of frames"):
        dump_json.parse_stack({"0": [["a"], [1]]}, bad)
    construct = tmp_path / "construct.json"
    construct.write_text('{"Torch.a.0.forward": 3}')
    with pytest.raises(MsprobeError, match=r"construct.json: entry 'Torch.a.0.forward' has parent 3"):
        dump_json.read_construct(construct)
    construct.write_text("[]")
    with pytest.raises(MsprobeError, match=r"not a construct\.json"):
        dump_json.read_construct(construct)


def test_create_file_empties_a_file_an_earlier_run_left_and_refuses_a_pipe(tmp_path: Path) -> None:
    """A new file is created, an earlier run's is emptied (its tail must not outlive a shorter write),
    and a named pipe at the name is refused at once, never waited on."""
    import os

    old = tmp_path / "x.pt"
    old.write_bytes(b"0123456789")
    for path in (old, tmp_path / "new.pt"):
        fd = dump_json.create_file(str(path))
        os.write(fd, b"ab")
        os.close(fd)
        assert path.read_bytes() == b"ab"
    os.mkfifo(tmp_path / "pipe")
    with pytest.raises(OSError, match=r"not a regular file|No such device"):
        dump_json.create_file(str(tmp_path / "pipe"))
