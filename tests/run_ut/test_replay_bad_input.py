"""Bad input never runs code from a file and never gives a traceback: skip or one line naming file+record."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from replay_dumps import csv_pair, forward, read_csv, tensor, write_dump

import msprobe.run_ut.replay
import msprobe.run_ut.session  # noqa: F401
from msprobe.run_ut.arg_values import InputError
from msprobe.run_ut.inputs import NO_INPUTS, ArgBuilder
from msprobe.run_ut.records import ApiRecord
from msprobe.run_ut.replay import replay
from msprobe.run_ut.tensor_files import load_tensor


def run(pytester: pytest.Pytester, dump: Path, *extra: str) -> pytest.RunResult:
    out = pytester.path / "out"
    return pytester.runpytest(
        "-p", "no:cacheprovider", "--msprobe-dump", str(dump), "--msprobe-out", str(out), *extra
    )


def tensor_dump(folder: Path, data_name: str) -> Path:
    spec = tensor("torch.float32", [4], -1.0, 1.0, data_name=data_name)
    return write_dump(folder, {"Torch.exp.0.forward": forward(spec)}, task="tensor")


class Boom:
    def __reduce__(self) -> tuple:
        return (os.system, ("touch PWNED",))


def test_missing_pt_skips_naming_the_file(pytester: pytest.Pytester) -> None:
    dump = tensor_dump(pytester.path / "d", "Torch.exp.0.forward.input.0.pt")
    result = run(pytester, dump, "-rs")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*Torch.exp.0.forward.input.0.pt: no such tensor file*"])
    row = read_csv(csv_pair(pytester.path / "out")[0])[1]
    assert row[:3] == ["Torch.exp.0", "SKIP", "SKIP"] and "no such tensor file" in row[3]


def test_pickled_object_is_refused_and_never_runs(pytester: pytest.Pytester) -> None:
    dump = tensor_dump(pytester.path / "d", "evil.pt")
    (dump / "dump_tensor_data").mkdir()
    torch.save({"x": Boom()}, dump / "dump_tensor_data" / "evil.pt")
    result = run(pytester, dump, "-rs")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*evil.pt: not a plain tensor file (weights_only=True refused it: *"])
    assert not (pytester.path / "PWNED").exists() and not Path("PWNED").exists()
    reason = read_csv(csv_pair(pytester.path / "out")[0])[1][3]
    assert reason.startswith("Torch.exp.0 input_args[0]: ") and "system" in reason, reason
    for advice in ("weights_only set to False", "weights_only=False", "Re-running", "add_safe_globals"):
        assert advice not in reason and advice not in result.stdout.str()


def test_dotdot_data_name_is_a_broken_record(pytester: pytest.Pytester) -> None:
    dump = tensor_dump(pytester.path / "d", "../../secret.pt")
    result = run(pytester, dump)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*dump.json: record 'Torch.exp.0': input_args[[]0]: "
            "data_name '../../secret.pt' escapes the dump folder*"
        ]
    )
    assert not any(line.startswith("Traceback") for line in result.outlines)


def test_absolute_data_name_is_a_broken_record(pytester: pytest.Pytester) -> None:
    dump = tensor_dump(pytester.path / "d", "/etc/passwd")
    run(pytester, dump).stdout.fnmatch_lines(["*data_name '/etc/passwd' is an absolute path*"])


def test_symlink_out_of_the_dump_is_refused(tmp_path: Path) -> None:
    data = tmp_path / "dump_tensor_data"
    data.mkdir()
    torch.save(torch.ones(2), tmp_path / "outside.pt")
    (data / "link.pt").symlink_to(tmp_path / "outside.pt")
    with pytest.raises(InputError, match=r"resolves outside the rank folder's own dump_tensor_data"):
        load_tensor(data, "link.pt")
    torch.save(torch.ones(2), data / "ok.pt")
    assert torch.equal(load_tensor(data, "ok.pt"), torch.ones(2))


def test_pt_holding_a_non_tensor_is_refused(tmp_path: Path) -> None:
    torch.save([1, 2, 3], tmp_path / "list.pt")
    with pytest.raises(InputError, match="holds a list, not a tensor"):
        load_tensor(tmp_path, "list.pt")
    (tmp_path / "raw.pt").write_bytes(pickle.dumps({"a": 1}))
    with pytest.raises(InputError) as exc:
        load_tensor(tmp_path, "raw.pt")
    assert str(exc.value).startswith(f"{tmp_path / 'raw.pt'}: not a plain tensor file (weights_only=True ")
    assert "False" not in str(exc.value) and "\n" not in str(exc.value)


def test_broken_records_fail_alone_and_the_rest_runs(pytester: pytest.Pytester) -> None:
    data = {
        "Torch.exp.0.forward": {"input_args": {"not": "a list"}, "input_kwargs": {}, "output": []},
        "Torch.tanh.0.forward": forward(tensor("torch.float32", [8], -1.0, 1.0)),
        "Torch.sin.0.forward": forward({"type": "torch.Tensor", "dtype": "torch.float32", "shape": "x"}),
        "Torch.cos.0.forward": forward(tensor("torch.float8_e4m3fn", [8], -1.0, 1.0)),
        "Torch.abs.0.forward": forward({"type": "torch.Tensor", "dtype": "torch.float32", "shape": [3]}),
    }
    dump = write_dump(pytester.path / "d", data)
    result = run(pytester, dump, "-rs")
    result.assert_outcomes(failed=2, passed=1, skipped=2)
    result.stdout.fnmatch_lines(
        [
            "*record 'Torch.exp.0': 'input_args' is not a list*",
            "*record 'Torch.sin.0': input_args[[]0]: tensor shape 'x' is not a list of sizes*",
        ]
    )
    rows = {r[0]: r for r in read_csv(csv_pair(pytester.path / "out")[0])[1:]}
    assert rows["Torch.cos.0"][3] == "Torch.cos.0 input_args[0]: Dtype is not supported: torch.float8_e4m3fn"
    assert rows["Torch.abs.0"][3] == (
        "Torch.abs.0 input_args[0]: the tensor has no numeric Max/Min (and no data_name), cannot generate it"
    )
    assert rows["Torch.exp.0"][1] == "SKIP"
    assert not any("Traceback" in line for line in result.outlines)


@pytest.mark.parametrize("name", ["=HYPERLINK.x.0.forward", "\t=HYPERLINK.x.0.forward"])
def test_csv_formula_names_are_not_written(pytester: pytest.Pytester, name: str) -> None:
    data = {name: forward(tensor("torch.float32", [8], -1.0, 1.0))}
    dump = write_dump(pytester.path / "d", data)
    result = run(pytester, dump)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*spreadsheet formula*"])
    assert read_csv(csv_pair(pytester.path / "out")[0])[1:] == []


@pytest.mark.parametrize(
    "name", ["Torch.exp\x1b[2J\x1b[31m.0.forward", "Torch.exp\n5 passed in 0.1s\n.1.forward"]
)
def test_control_characters_in_names_are_refused_and_never_printed_raw(
    pytester: pytest.Pytester, name: str
) -> None:
    """An escape sequence would clear or recolour the terminal, a newline forge a summary line."""
    data = {name: forward(tensor("torch.float32", [8], -1.0, 1.0))}
    dump = write_dump(pytester.path / "d", data)
    result = run(pytester, dump, "-v", "-rA")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*holds a control character*"])
    assert "\x1b" not in result.stdout.str() and not any(
        line.startswith("5 passed") for line in result.outlines
    )
    assert read_csv(csv_pair(pytester.path / "out")[0])[1:] == []


def test_a_refused_global_is_named_without_torchs_advice(tmp_path: Path) -> None:
    torch.save({"f": print}, tmp_path / "global.pt")  # an allowed-globals refusal, not a blocked module
    with pytest.raises(InputError) as exc:
        load_tensor(tmp_path, "global.pt")
    message = str(exc.value)
    assert message == (
        f"{tmp_path / 'global.pt'}: not a plain tensor file (weights_only=True refused it: "
        "Unsupported global: GLOBAL print was not an allowed global by default)"
    )


def test_tensor_without_shape_fails_naming_record_argument_and_key(pytester: pytest.Pytester) -> None:
    spec = {k: v for k, v in tensor("torch.float32", [4], -1.0, 1.0).items() if k != "shape"}
    dump = write_dump(pytester.path / "d", {"Tensor.__mul__.0.forward": forward(spec, spec)})
    result = run(pytester, dump)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["*dump.json: record 'Tensor.__mul__.0': input_args[[]0]: tensor has no 'shape' key"]
    )
    row = read_csv(csv_pair(pytester.path / "out")[0])[1]
    assert row == ["Tensor.__mul__.0", "SKIP", "SKIP", "input_args[0]: tensor has no 'shape' key"]


def test_data_file_differing_from_its_record_skips_naming_file_and_difference(
    pytester: pytest.Pytester,
) -> None:
    data = {
        "Torch.exp.0.forward": forward(tensor("torch.float32", [256, 64], -1.0, 1.0, data_name="shape.pt")),
        "Torch.exp.1.forward": forward(tensor("torch.float32", [5], -1.0, 1.0, data_name="dtype.pt")),
        "Torch.exp.2.forward": forward(tensor("torch.float32", [5], -1.0, 1.0, data_name="dtype.npy")),
        "Torch.exp.3.forward": forward(tensor("torch.float32", [5], -1.0, 1.0, data_name="same.pt")),
    }
    dump = write_dump(pytester.path / "d", data, task="tensor")
    files = dump / "dump_tensor_data"
    files.mkdir()
    torch.save(torch.ones(5), files / "shape.pt")
    torch.save(torch.ones(5, dtype=torch.float64), files / "dtype.pt")
    np.save(files / "dtype.npy", np.ones(5, dtype=np.float16))
    torch.save(torch.ones(5), files / "same.pt")
    result = run(pytester, dump, "-rs")
    result.assert_outcomes(skipped=3, passed=1)
    rows = {r[0]: r for r in read_csv(csv_pair(pytester.path / "out")[0])[1:]}
    assert rows["Torch.exp.0"][1:] == [
        "SKIP",
        "SKIP",
        f"Torch.exp.0 input_args[0]: {files / 'shape.pt'}: shape [5] in the file, [256, 64] in the record",
    ]
    assert rows["Torch.exp.1"][3] == (
        f"Torch.exp.1 input_args[0]: {files / 'dtype.pt'}: dtype torch.float64 in the file, "
        "torch.float32 in the record"
    )
    assert rows["Torch.exp.2"][3] == (
        f"Torch.exp.2 input_args[0]: {files / 'dtype.npy'}: dtype torch.float16 in the file, "
        "torch.float32 in the record"
    )
    assert rows["Torch.exp.3"][1] == "pass"


def test_bfloat16_saved_as_float32_npy_replays_in_bfloat16(tmp_path: Path) -> None:
    """numpy has no bfloat16: a dump stores such a tensor as float32 in a .npy (exact values)."""
    values = torch.linspace(-1, 1, 8, dtype=torch.bfloat16)
    np.save(tmp_path / "x.npy", values.float().numpy())
    torch.save(values.float(), tmp_path / "x.pt")
    builder = ArgBuilder(tmp_path, torch.Generator(), "Torch.exp.0")
    loaded = builder.tensor(tensor("torch.bfloat16", [8], -1.0, 1.0, data_name="x.npy"))
    assert loaded.dtype == torch.bfloat16 and torch.equal(loaded, values)
    with pytest.raises(InputError, match=r"dtype torch\.float32 in the file, torch\.bfloat16 in the record"):
        builder.tensor(tensor("torch.bfloat16", [8], -1.0, 1.0, data_name="x.pt"))


def test_a_nested_tensor_file_for_a_dense_record_names_the_file(tmp_path: Path) -> None:
    """torch's own error for it ("NestedTensorImpl doesn't support sizes ... Please file an issue")
    named neither the file nor the argument."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's prototype warning for nested tensors
        nested = torch.nested.nested_tensor([torch.ones(4), torch.ones(2)])
    torch.save(nested, tmp_path / "x.pt")
    builder = ArgBuilder(tmp_path, torch.Generator(), "Torch.exp.0")
    with pytest.raises(InputError, match=r"x\.pt: holds a nested tensor, the record a tensor of shape \[4\]"):
        builder.tensor(tensor("torch.float32", [4], -1.0, 1.0, data_name="x.pt"))


def test_int32_class_target_file_of_cross_entropy_still_replays(pytester: pytest.Pytester) -> None:
    """The table draws cross_entropy's int32 target as int64; a saved int32 target is its record's dtype."""
    logits = tensor("torch.float32", [4, 3], -1.0, 1.0, data_name="logits.pt")
    target = tensor("torch.int32", [4], 0, 2, data_name="target.pt")
    dump = write_dump(
        pytester.path / "d", {"Functional.cross_entropy.0.forward": forward(logits, target)}, task="tensor"
    )
    (dump / "dump_tensor_data").mkdir()
    torch.save(torch.linspace(-1, 1, 12).reshape(4, 3), dump / "dump_tensor_data" / "logits.pt")
    torch.save(torch.tensor([0, 2, 1, 0], dtype=torch.int32), dump / "dump_tensor_data" / "target.pt")
    result = run(pytester, dump, "-rs")
    result.assert_outcomes(passed=1)


def test_a_record_without_inputs_says_so(tmp_path: Path) -> None:
    """A dump made with ``data_mode: ["output"]`` has forward records with outputs only: each API is
    a SKIP that names the cause, not the API's own complaint about missing arguments."""
    out = tensor("torch.float32", [2, 3], -1.0, 1.0)
    result = replay(ApiRecord("Functional.linear.0", 0, {"output": [out]}, None), tmp_path, "cpu")
    assert result.result[1] == "SKIP"
    assert result.result[3] == f"Functional.linear.0: {NO_INPUTS}"


# --- what a crafted dump.json names is never run, read, or drawn beyond reason ------------------------


def test_a_record_naming_what_no_dump_records_is_never_called(pytester: pytest.Pytester) -> None:
    """``torch.load`` with ``weights_only=False`` of a pickle shipped in the dump, ``torch.save`` to
    any path, a global setting: no dump records them, so a dump.json naming them is refused before
    anything runs (before, the pickle's payload ran and the API "passed")."""
    folder = pytester.path / "d"
    folder.mkdir()
    torch.save({"x": Boom()}, folder / "payload.pt")
    data = {
        "Torch.load.0.forward": forward(
            {"type": "str", "value": str(folder / "payload.pt")},
            weights_only={"type": "bool", "value": False},
        ),
        "Torch.save.0.forward": forward(
            tensor("torch.float32", [4], -1.0, 1.0),
            {"type": "str", "value": str(pytester.path / "written.pt")},
        ),
        "Torch.set_default_dtype.0.forward": forward({"type": "torch.dtype", "value": "torch.float64"}),
        "Torch.exp.0.forward": forward(tensor("torch.float32", [4], -1.0, 1.0)),
    }
    dump = write_dump(folder, data)
    result = run(pytester, dump, "-rs")
    result.assert_outcomes(passed=1, skipped=3)
    assert not (pytester.path / "PWNED").exists() and not Path("PWNED").exists()
    assert not (pytester.path / "written.pt").exists()
    assert torch.get_default_dtype() == torch.float32
    rows = {r[0]: r for r in read_csv(csv_pair(pytester.path / "out")[0])[1:]}
    for name in ("Torch.load.0", "Torch.save.0", "Torch.set_default_dtype.0"):
        assert rows[name][1] == "SKIP" and "not an API a dump records" in rows[name][3], rows[name]


def test_every_api_of_the_committed_dumps_is_one_a_dump_records() -> None:
    """The refusal above takes nothing from real dumps: every Torch/Tensor/Functional/VF record of
    upstream's and our dumps names a function the dump records."""
    import json

    from msprobe.run_ut import registry

    seen = 0
    data_root = Path(__file__).resolve().parents[1] / "data"
    for path in data_root.rglob("dump.json"):
        try:
            data = json.loads(path.read_text(encoding="utf-8")).get("data", {})
        except (ValueError, UnicodeDecodeError):
            continue
        if not isinstance(data, dict) or "Cell" in " ".join(data)[:10000]:
            continue  # MindSpore dumps are not replayed
        for key in data:
            parts = key.split(".")
            if len(parts) < 4 or parts[0] not in ("Torch", "Tensor", "Functional", "VF"):
                continue
            bare = ".".join(parts[1:-2])
            func = registry.resolve(parts[0], bare, registry.lookup(parts[0], bare))
            if func is not None:
                seen += 1
                assert registry.recordable(parts[0], bare, func), key
    assert seen > 500


def test_a_statistics_record_larger_than_the_draw_limit_is_skipped_with_its_size(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MSPROBE_MAX_TENSOR_GB", str(1 / 1024))  # 1 MiB
    big = ApiRecord("Torch.exp.0", 0, forward(tensor("torch.float32", [512, 1024], -1.0, 1.0)), None)
    result = replay(big, tmp_path, "cpu")
    assert result.outcome == "skipped"
    assert result.reason.endswith(
        "shape [512, 1024] torch.float32 is 2.0 MiB, more than replay draws from statistics "
        "(1.0 MiB; set MSPROBE_MAX_TENSOR_GB to allow it)"
    ), result.reason
    small = ApiRecord("Torch.exp.1", 0, forward(tensor("torch.float32", [64, 1024], -1.0, 1.0)), None)
    assert replay(small, tmp_path, "cpu").outcome == "passed"


def test_a_tensor_folder_linked_out_of_the_dump_is_refused(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    torch.save(torch.ones(2), elsewhere / "x.pt")
    dump = tmp_path / "dump"
    dump.mkdir()
    (dump / "dump_tensor_data").symlink_to(elsewhere, target_is_directory=True)
    with pytest.raises(InputError, match=r"resolves outside the rank folder's own dump_tensor_data"):
        load_tensor(dump / "dump_tensor_data", "x.pt")


def test_a_named_pipe_for_a_tensor_file_is_refused_not_waited_on(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "fifo.pt")
    with pytest.raises(InputError, match="not a regular file"):
        load_tensor(tmp_path, "fifo.pt")


def test_an_object_recorded_as_its_fields_is_named_in_one_short_line(tmp_path: Path) -> None:
    """A dataclass argument (``F.linear_cross_entropy``'s options) is dumped as its fields, without its
    type: the SKIP says so in one short line (it printed the whole description)."""
    fields = {f"field_{i}": {"type": "int", "value": i} for i in range(9)}
    record = ApiRecord(
        "Functional.linear_cross_entropy.0",
        0,
        forward(tensor("torch.float32", [4, 8], -1.0, 1.0), options=fields),
        None,
    )
    result = replay(record, tmp_path, "cpu")
    assert result.outcome == "skipped"
    assert result.reason.endswith(
        "an object recorded as its fields ('field_0', 'field_1', 'field_2', 'field_3', 'field_4', "
        "'field_5', ...) without its type: cannot rebuild it"
    ), result.reason
    assert "value" not in result.reason and len(result.reason) < 200


def test_an_empty_object_is_named_as_upstreams_positional_dtype(tmp_path: Path) -> None:
    """Upstream's dump writes a positional ``torch.dtype`` or ``torch.device`` (``x.view(torch.int32)``)
    as ``{}``: the SKIP names that, not "an object recorded as its fields ()"."""
    record = ApiRecord("Tensor.view.0", 0, forward(tensor("torch.float32", [4], -1.0, 1.0), {}), None)
    result = replay(record, tmp_path, "cpu")
    assert result.outcome == "skipped"
    assert "a positional torch.dtype or torch.device" in result.reason and "fields" not in result.reason


def test_a_missing_file_inside_a_list_argument_names_its_place(tmp_path: Path) -> None:
    """``torch.cat([a, b])`` whose ``b`` file is gone: the reason names ``input_args[0][1]``, not the
    whole list."""
    torch.save(torch.ones(2, 3), tmp_path / "a.pt")
    present = tensor("torch.float32", [2, 3], 1.0, 1.0, data_name="a.pt")
    gone = tensor("torch.float32", [2, 3], 1.0, 1.0, data_name="gone.pt")
    record = ApiRecord("Torch.cat.0", 0, forward([present, gone]), None)
    result = replay(record, tmp_path, "cpu")
    assert result.outcome == "skipped"
    assert "Torch.cat.0 input_args[0][1]: " in result.reason and "gone.pt" in result.reason, result.reason


def test_what_our_dump_writes_on_purpose_is_a_skip_with_its_reason(pytester: pytest.Pytester) -> None:
    """A nested (jagged) tensor's shape holds null, and a float8 tensor is saved as float32: records
    the dump writes on purpose, which the replay skips for what they are, not as broken or corrupt."""
    script = (
        "import sys, torch\n"
        "from msprobe.pytorch import PrecisionDebugger\n"
        "dbg = PrecisionDebugger(dump_path=sys.argv[1], task='tensor', level='L1')\n"
        "jagged = torch.nested.nested_tensor([torch.ones(2, 3), torch.ones(4, 3)], layout=torch.jagged)\n"
        "x = torch.linspace(-1, 1, 4)\n"
        "dbg.start()\n"
        "torch.nn.functional.relu(jagged)\n"
        "x.to(torch.float8_e4m3fn).float()\n"
        "dbg.stop()\n"
    )
    # a process of its own: the pytester run below must not see the modules the dump imported
    subprocess.run([sys.executable, "-c", script, str(pytester.path / "dump")], check=True)
    result = run(pytester, pytester.path / "dump" / "step0" / "rank", "-rs")
    assert result.ret == 0
    rows = {r[0]: r for r in read_csv(csv_pair(pytester.path / "out")[0])[1:]}
    assert rows["Functional.relu.0"][1] == "SKIP"
    assert "a nested tensor (shape [2, None, 3])" in rows["Functional.relu.0"][3]
    assert (
        rows["Tensor.float.0"][3]
        == "Tensor.float.0 input_args[0]: Dtype is not supported: torch.float8_e4m3fn"
    )


def test_a_misspelt_run_ut_key_is_said_not_silently_ignored(pytester: pytest.Pytester) -> None:
    dump = write_dump(
        pytester.path / "d", {"Torch.tanh.0.forward": forward(tensor("torch.float32", [8], -1, 1))}
    )
    config = pytester.path / "config.json"
    config.write_text('{"run_ut": {"whitelist": ["conv2d"]}}')
    result = run(pytester, dump, f"--msprobe-config={config}")
    result.stdout.fnmatch_lines(
        [
            "msprobe: warning: *config.json: unknown key 'whitelist' in the 'run_ut' section is ignored; "
            "did you mean 'white_list'?"
        ]
    )


def test_an_output_recorded_too_large_to_compute_is_skipped_with_its_size(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``torch.full`` takes its size from numbers: no drawn tensor is large, its output would be."""
    monkeypatch.setenv("MSPROBE_MAX_TENSOR_GB", str(1 / 1024))  # 1 MiB drawn, 4 MiB computed
    size = {"type": "torch.Size", "value": [1024, 2048]}
    out = tensor("torch.float32", [1024, 2048], 1.0, 1.0)
    big = ApiRecord("Torch.full.0", 0, forward(size, {"type": "float", "value": 1.0}, output=[out]), None)
    result = replay(big, tmp_path, "cpu")
    assert result.outcome == "skipped"
    assert result.reason.endswith(
        "output[0]: shape [1024, 2048] torch.float32 is 8.0 MiB, more than replay computes as an output "
        "(4.0 MiB; set MSPROBE_MAX_TENSOR_GB to allow it)"
    ), result.reason
    out = tensor("torch.float32", [1024, 1024], 1.0, 1.0)
    size = {"type": "torch.Size", "value": [1024, 1024]}
    fits = ApiRecord("Torch.full.1", 0, forward(size, {"type": "float", "value": 1.0}, output=[out]), None)
    assert replay(fits, tmp_path, "cpu").outcome == "passed"


@pytest.mark.parametrize(
    ("name", "args", "claimed"),
    [
        (
            "Torch.full.0",
            [{"type": "torch.Size", "value": [1024, 2048]}, {"type": "float", "value": 1.0}],
            [[4]],
        ),
        (
            "Torch.full.1",
            [{"type": "torch.Size", "value": [1024, 2048]}, {"type": "float", "value": 1.0}],
            [],
        ),
        (
            "Tensor.repeat.0",
            [
                tensor("torch.float32", [4, 4], -1.0, 1.0),
                {"type": "int", "value": 256},
                {"type": "int", "value": 512},
            ],
            [[4, 4]],
        ),
    ],
)
def test_an_output_understated_by_its_record_is_refused_by_its_computed_size(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, args: list[Any], claimed: list[list[int]]
) -> None:
    """A damaged or crafted record can claim a small output (or none) for a call that allocates a
    large one: the size is computed on the meta device from the inputs, not taken from the record."""
    monkeypatch.setenv("MSPROBE_MAX_TENSOR_GB", str(1 / 1024))  # 4 MiB computed
    outs = [tensor("torch.float32", shape, 1.0, 1.0) for shape in claimed]
    result = replay(ApiRecord(name, 0, forward(*args, output=outs), None), tmp_path, "cpu")
    assert result.outcome == "skipped"
    assert result.reason.endswith(
        "output[0] as computed: shape [1024, 2048] torch.float32 is 8.0 MiB, more than replay computes as an "
        "output (4.0 MiB; set MSPROBE_MAX_TENSOR_GB to allow it)"
    ), result.reason


@pytest.mark.parametrize(("where", "given"), [(".", "root"), ("step0", "rank"), (".", "rank")])
def test_a_conftest_inside_the_dump_is_refused_never_imported(
    pytester: pytest.Pytester, where: str, given: str
) -> None:
    """pytest imports a conftest.py met while collecting: inside a dump it would run the dump's code."""
    root = pytester.path / "dump"
    folder = write_dump(
        root / "step0" / "rank", {"Torch.exp.0.forward": forward(tensor("torch.float32", [4], -1.0, 1.0))}
    )
    marker = pytester.path / "PWNED"
    (root / where / "conftest.py").write_text(f"open({str(marker)!r}, 'w').close()\n", encoding="utf-8")
    result = run(pytester, root if given == "root" else folder)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "is a conftest.py inside the dump" in result.stderr.str()
    assert not marker.exists()


def test_statistics_the_dtype_cannot_hold_name_the_argument(tmp_path: Path) -> None:
    spec = tensor("torch.float32", [4], -1e308, 1e308)  # no float32 tensor has these
    result = replay(ApiRecord("Functional.relu.0", 0, forward(spec), None), tmp_path, "cpu")
    assert result.outcome == "skipped"
    assert result.reason.startswith(
        "Functional.relu.0 input_args[0]: cannot draw torch.float32 [4] from its statistics "
        "(Max 1e+308, Min -1e+308): "
    ), result.reason


def test_a_pytest_configuration_inside_the_dump_is_refused(pytester: pytest.Pytester) -> None:
    """pytest reads the configuration file found above the paths it is given: a node id inside a
    dump makes a pytest.ini of the dump pytest's own (its addopts can import code)."""
    folder = write_dump(
        pytester.path / "dump" / "step0" / "rank",
        {"Torch.exp.0.forward": forward(tensor("torch.float32", [4], -1.0, 1.0))},
    )
    (folder / "pytest.ini").write_text("[pytest]\naddopts = -q\n", encoding="utf-8")
    result = pytester.runpytest(
        "-p", "no:cacheprovider", "--msprobe-dump", str(folder), f"{folder / 'dump.json'}::Torch.exp.0"
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert (
        f"pytest took its configuration from {folder / 'pytest.ini'}, inside the dump" in result.stderr.str()
    )


def _plant(pytester: pytest.Pytester, case: str) -> tuple[Path, Path]:
    """A dump with code planted where pytest would import it while collecting; (dump root, marker)."""
    root = pytester.path / "dump"
    write_dump(
        root / "step0" / "rank", {"Torch.exp.0.forward": forward(tensor("torch.float32", [4], -1.0, 1.0))}
    )
    marker = pytester.path / "PWNED"
    payload = f"open({str(marker)!r}, 'w').close()\n"
    if case == "test file":
        (root / "test_evil.py").write_text(payload, encoding="utf-8")
        (root / "step0" / "rank" / "test_evil2.py").write_text(payload, encoding="utf-8")
    elif case == "linked folder":
        elsewhere = pytester.path / "elsewhere"
        elsewhere.mkdir()
        (elsewhere / "conftest.py").write_text(payload, encoding="utf-8")
        (root / "extra").symlink_to(elsewhere, target_is_directory=True)
    else:  # packages
        (root / "__init__.py").write_text(payload, encoding="utf-8")
        (root / "step0" / "__init__.py").write_text(payload, encoding="utf-8")
    return root, marker


@pytest.mark.parametrize("case", ["test file", "linked folder", "packages"])
def test_only_the_dump_json_files_of_a_dump_are_collected(pytester: pytest.Pytester, case: str) -> None:
    root, marker = _plant(pytester, case)
    result = run(pytester, root)
    assert not marker.exists()
    result.assert_outcomes(passed=1)


def test_a_rank_folder_in_a_project_keeps_the_projects_own_configuration(pytester: pytest.Pytester) -> None:
    """``./rank0/dump.json`` beside the project's pytest.ini and conftest.py: the project is not a dump."""
    folder = write_dump(
        pytester.path / "rank0", {"Torch.exp.0.forward": forward(tensor("torch.float32", [4], -1.0, 1.0))}
    )
    pytester.makeini("[pytest]\nmarkers = mine\n")
    pytester.makeconftest("")
    run(pytester, folder).assert_outcomes(passed=1)


def test_a_dump_reached_through_a_link_replays(pytester: pytest.Pytester) -> None:
    real = write_dump(
        pytester.path / "real" / "step0" / "rank",
        {"Torch.exp.0.forward": forward(tensor("torch.float32", [4], -1.0, 1.0))},
    )
    link = pytester.path / "link"
    link.symlink_to(real.parent.parent, target_is_directory=True)
    run(pytester, link).assert_outcomes(passed=1)


def test_a_dump_json_that_is_a_link_reads_the_tensors_beside_its_target(tmp_path: Path) -> None:
    """The tensors were looked for beside the link: every API was a SKIP, 'no such tensor file'."""
    from replay_dumps import forward, tensor, write_dump

    from msprobe.run_ut.records import read_dump
    from msprobe.run_ut.replay import replay

    spec = tensor("torch.float32", [4], -1.0, 1.0, data_name="Torch.exp.0.forward.input.0.pt")
    real = write_dump(tmp_path / "real", {"Torch.exp.0.forward": forward(spec)}, task="tensor")
    (real / "dump_tensor_data").mkdir()
    torch.save(torch.linspace(-1, 1, 4), real / "dump_tensor_data" / "Torch.exp.0.forward.input.0.pt")
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "dump.json").symlink_to(real / "dump.json")
    dump = read_dump(tmp_path / "other" / "dump.json")
    assert replay(dump.records[0], dump.data_dir, "cpu").outcome == "passed"


@pytest.mark.parametrize("dtype, named", [("torch.float32", "Float"), ("torch.float16", "Half")])
def test_a_call_that_raised_in_the_model_is_skipped_with_its_own_error(
    tmp_path: Path, dtype: str, named: str
) -> None:
    """The record of a call that raised (inputs only: ``x & x`` on floats) was skipped with the
    benchmark's error, naming a dtype the model never used ("not implemented for 'Double'")."""
    x = tensor(dtype, [8], -1.0, 1.0)
    record = forward(x, x)
    del record["output"]
    result = replay(ApiRecord("Tensor.__and__.0", 0, record, None), tmp_path, "cpu")
    assert result.outcome == "skipped"
    assert result.reason.endswith(f"not implemented for '{named}'"), result.reason


def test_a_deflated_pt_is_refused_before_it_is_inflated(tmp_path: Path) -> None:
    """torch.save never compresses; a deflated storage of zeros grows ~1000-fold in torch.load, before
    its shape is compared with the record's (a 40 MB file would take 40 GB)."""
    import io
    import zipfile

    saved = io.BytesIO()
    torch.save(torch.zeros(1 << 20), saved)  # 4 MiB of zeros
    with zipfile.ZipFile(saved) as src, zipfile.ZipFile(tmp_path / "bomb.pt", "w") as out:
        for info in src.infolist():
            method = zipfile.ZIP_DEFLATED if "/data/" in info.filename else zipfile.ZIP_STORED
            out.writestr(info.filename, src.read(info), compress_type=method)
    assert (tmp_path / "bomb.pt").stat().st_size < 64 << 10
    refused = r"bomb\.pt: not a plain tensor file \(its entry '.*/data/0' is compressed"
    with pytest.raises(InputError, match=refused):
        load_tensor(tmp_path, "bomb.pt")
    torch.save(torch.ones(2), tmp_path / "ok.pt")  # what torch.save writes still loads
    assert torch.equal(load_tensor(tmp_path, "ok.pt"), torch.ones(2))


@pytest.mark.parametrize(
    ("array", "why"),
    [
        (np.zeros(3, dtype=[("a", "<f4")]), "can't convert np.ndarray of type numpy.void"),
        (np.array(["a", "b"]), "can't convert np.ndarray of type numpy.str_"),
        (None, "No data left in file"),
        (b"not a numpy file", "This file contains pickled (object) data"),
    ],
)
def test_an_npy_that_is_no_plain_array_names_the_file_without_numpys_advice(
    tmp_path: Path, array: object, why: str
) -> None:
    path = tmp_path / "x.npy"
    if isinstance(array, np.ndarray):
        np.save(path, array, allow_pickle=False)
    else:
        path.write_bytes(array or b"")
    with pytest.raises(InputError) as exc:
        ArgBuilder(tmp_path, torch.Generator(), "Torch.exp.0").value(
            tensor("torch.float32", [3], 0.0, 1.0, data_name="x.npy"), grad_ok=False
        )
    message = str(exc.value)
    # numpy's and torch's own words (``why``) may change between versions: the gist only
    assert (
        message.startswith(f"{path}: not a plain numpy array (") and why.split()[0].lower() in message.lower()
    )
    assert "trust" not in message and "allow_pickle=`" not in message and "\n" not in message


def test_a_tensor_file_holding_a_meta_tensor_names_the_file(tmp_path: Path) -> None:
    """A meta tensor of the recorded shape loaded, then failed in the replay with torch's own words
    ("Cannot copy out of meta tensor; no data!"), which name neither the file nor the argument."""
    torch.save(torch.zeros(4, 3, device="meta"), tmp_path / "x.pt")
    with pytest.raises(InputError, match=r"x\.pt: holds a meta tensor") as exc:
        load_tensor(tmp_path, "x.pt")
    assert "\n" not in str(exc.value)


@pytest.mark.parametrize("version", [1, 2, 3])
def test_an_npy_header_claiming_more_than_the_file_holds_is_refused_before_allocating(
    tmp_path: Path, version: int
) -> None:
    """numpy allocates the array its header claims before it finds the file short: a 200-byte file asked
    for 11 TiB, and the API was skipped with "Unable to allocate 11.2 TiB ...", naming no file (a
    claim within the host's memory was allocated in full)."""
    header = "{'descr': '<f4', 'fortran_order': False, 'shape': (4, 3, 16, 16000000000), }"
    # format 1.0 has a 2-byte header length, 2.0 and 3.0 (utf-8 header; np.load reads it) a 4-byte one
    size = 2 if version == 1 else 4
    header += " " * (63 - (8 + size + len(header)) % 64) + "\n"
    magic = b"\x93NUMPY" + bytes([version, 0]) + len(header).to_bytes(size, "little")
    (tmp_path / "x.npy").write_bytes(magic + header.encode() + b"\0" * 64)
    with pytest.raises(InputError) as exc:
        load_tensor(tmp_path, "x.npy")
    message = str(exc.value)
    assert message.startswith(f"{tmp_path / 'x.npy'}: not a plain numpy array (its header claims shape ")
    assert "the file holds 64" in message and "Unable to allocate" not in message
