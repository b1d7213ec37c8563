import pytest

from msprobe.cli import SUBCOMMANDS, main


def test_help_lists_every_subcommand(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for name in SUBCOMMANDS:
        assert name in out


def test_unknown_subcommand_is_one_line_error(capsys):
    assert main(["frobnicate"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("msprobe: error: unknown command 'frobnicate'")


def test_upstream_framework_prefix_is_accepted(capsys):
    # `msprobe -f pytorch <cmd>` is upstream 8.1.1's spelling; the prefix selects nothing here.
    assert main(["-f", "pytorch", "frobnicate"]) == 2
    assert "unknown command 'frobnicate'" in capsys.readouterr().err


def test_unknown_framework_is_named_in_one_line(capsys):
    assert main(["-f", "xyz", "run_ut"]) == 2
    err = capsys.readouterr().err
    assert err == "msprobe: error: -f xyz: unknown framework (pytorch, pt, mindspore, ms)\n"
    assert main(["--framework=xyz", "run_ut"]) == 2
    assert capsys.readouterr().err.startswith("msprobe: error: --framework xyz: unknown framework (")
    assert main(["-f"]) == 2
    assert capsys.readouterr().err.startswith("msprobe: error: -f: expected a framework (pytorch")
    assert main(["--framework=mindspore", "frobnicate"]) == 2
    assert "unknown command 'frobnicate'" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["run_ut", "multi_run_ut", "compare", "api_precision_compare"])
@pytest.mark.parametrize("prefix", [["-f", "mindspore"], ["--framework", "ms"], ["--framework=mindspore"]])
def test_mindspore_framework_before_a_pytorch_only_command_is_refused_in_one_line(prefix, command, capsys):
    # 8.1.1's `msprobe -f mindspore run_ut` is its MindSpore checker: never silently PyTorch's replay
    assert main([*prefix, command, "-api_info", "dump.json", "-npu", "a", "-gpu", "b"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("msprobe: error: ") and err.count("\n") == 1
    assert f"{command}: not supported: replay and compare here are PyTorch's only" in err


def test_upstream_multi_run_ut_spelling_runs_run_ut(tmp_path, capsys):
    # 8.1.1's scripts call `msprobe -f pytorch multi_run_ut ... -n 8`: the same replay as run_ut
    missing = tmp_path / "nope.json"
    assert main(["-f", "pytorch", "multi_run_ut", "-api_info", str(missing), "-n", "2"]) == 2
    assert capsys.readouterr().err.strip() == f"msprobe: error: -api_info {missing}: no such file or folder"


@pytest.mark.parametrize("name", sorted(SUBCOMMANDS))
def test_usage_names_the_command_as_typed(name, capsys):
    # `msprobe compare --bogus` must not print the usage of another program (`msprobe-compare`)
    with pytest.raises(SystemExit):
        main([name, "--bogus-flag"])
    err = capsys.readouterr().err
    assert err.startswith(f"usage: msprobe {name} "), err
    assert f"msprobe {name}: error:" in err


@pytest.mark.parametrize("command", ["run_ut", "multi_run_ut"])
@pytest.mark.parametrize("verbose", ["-v", "--verbose"])
def test_run_ut_verbose_is_pytest_verbosity_not_tracebacks(command, verbose, tmp_path, capsys):
    # run_ut's -v is `pytest -v`: a path mistake stays the documented one line with exit status 2
    missing = tmp_path / "nonexist"
    assert main([command, "-api_info", str(missing), "-o", str(tmp_path / "out"), verbose]) == 2
    err = capsys.readouterr().err
    assert err == f"msprobe: error: -api_info {missing}: no such file or folder\n"
