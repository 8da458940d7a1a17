"""`gpu-exporter <command> --help` lists every option the table gives that command: its flags
and the variables it reads (variables only, for settings without a flag)."""

from __future__ import annotations

import re

import pytest

from exporter.cli import main
from exporter.options import OPTIONS, Command, for_command

COMMANDS: list[Command] = sorted({c for o in OPTIONS for c in o.commands})


def help_of(command: Command, capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as stopped:
        main([command, "--help"])
    assert stopped.value.code == 0
    return capsys.readouterr().out


def test_every_command_has_options() -> None:
    assert COMMANDS == ["advise", "doctor", "generate", "report", "serve"]


@pytest.mark.parametrize("command", COMMANDS)
def test_help_lists_every_option_of_the_command(command: Command,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    text = help_of(command, capsys)
    assert text.startswith(f"usage: gpu-exporter {command}")
    # argparse wraps lines, so compare with the words run together
    words = " ".join(text.split())
    for option in for_command(command):
        for spelling in (*option.flags, *option.env):
            assert spelling in words, f"{option.name}: {spelling} missing from --help"


@pytest.mark.parametrize("command", COMMANDS)
def test_help_leaves_out_other_commands_options(command: Command,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    words = set(re.findall(r"--[\w.-]+", help_of(command, capsys)))
    own = {f for o in for_command(command) for f in o.flags}
    others = {f for o in OPTIONS if command not in o.commands for f in o.flags
              if f.startswith("--")} - own
    assert others, "every flag belongs to every command: nothing to check"
    assert not others & words
