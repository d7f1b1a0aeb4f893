"""Shell completion: ``gnomon completion bash|zsh`` prints a script that asks ``gnomon
__complete WORDS...`` for the candidates, which walks the argparse tree itself, so a new
command or flag completes without an edit here.

    eval "$(gnomon completion bash)"      # in ~/.bashrc
    eval "$(gnomon completion zsh)"       # in ~/.zshrc (through bashcompinit)
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

BASH = """\
_gnomon_complete() {
    local IFS=$'\\n'
    COMPREPLY=($(compgen -W "$(gnomon __complete "${COMP_WORDS[@]:1:COMP_CWORD-1}" \\
        2>/dev/null)" -- "${COMP_WORDS[COMP_CWORD]}"))
}
complete -o default -F _gnomon_complete gnomon
"""
ZSH = "autoload -U +X bashcompinit && bashcompinit\n" + BASH
SCRIPTS = {"bash": BASH, "zsh": ZSH}


def candidates(parser: argparse.ArgumentParser, words: Sequence[str]) -> list[str]:
    """What may follow `words` (the command line after ``gnomon``, without the word being
    completed): the subcommands at that point, the choices of an option that takes one,
    else the options of the command reached."""
    i = 0
    while i < len(words):
        word = words[i]
        option = _option(parser, word)
        takes_value = option is not None and option.nargs != 0 and "=" not in word
        if takes_value and i == len(words) - 1:  # its value is being completed
            return sorted(map(str, option.choices or ()))  # type: ignore[union-attr]
        if option is None:
            parser = _subcommands(parser).get(word, parser)
        i += 2 if takes_value else 1
    sub = _subcommands(parser)
    if sub:
        return sorted(sub)
    return sorted(s for a in parser._actions for s in a.option_strings
                  if s.startswith("--") and a.help != argparse.SUPPRESS)


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _option(parser: argparse.ArgumentParser, word: str) -> argparse.Action | None:
    if not word.startswith("-"):
        return None
    return next((a for a in parser._actions if word.split("=", 1)[0] in a.option_strings),
                None)
