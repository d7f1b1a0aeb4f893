"""Shell completion (client/cli/completion.py): the candidates walk the real parser, and
the bash script completes through a real bash and the installed `gnomon`."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from gnomon.client.cli.completion import candidates
from gnomon.client.cli.parser import build_parser


def test_candidates_follow_the_command_tree():
    parser = build_parser()
    assert {"job", "run", "worker", "completion"} <= set(candidates(parser, []))
    assert {"create", "trigger", "pause"} <= set(candidates(parser, ["job"]))
    assert {"--wait", "--wait-timeout", "--json"} <= set(candidates(parser, ["job", "trigger"]))
    # An option's value is skipped, not taken for a command; choices complete.
    assert set(candidates(parser, ["-s", "job", "job"])) == set(candidates(parser, ["job"]))
    assert candidates(parser, ["completion", "--json"]) == candidates(parser, ["completion"])
    assert "--log-level" in candidates(parser, ["worker", "shell"])
    assert candidates(parser, ["worker", "shell", "--log-level"]) == [
        "debug", "error", "info", "warning"]


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash")
def test_the_bash_script_completes_through_gnomon():
    bin_dir = os.path.dirname(sys.executable)
    if not os.path.exists(os.path.join(bin_dir, "gnomon")):
        pytest.skip("the gnomon console script is not installed here")
    script = subprocess.run([os.path.join(bin_dir, "gnomon"), "completion", "bash"],
                            capture_output=True, text=True, check=True).stdout
    probe = script + (
        'COMP_WORDS=(gnomon job tri); COMP_CWORD=2; _gnomon_complete\n'
        'printf "%s\\n" "${COMPREPLY[@]}"\n')
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ.get('PATH', '')}"}
    done = subprocess.run(["bash", "--norc", "--noprofile", "-c", probe], capture_output=True,
                          text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["trigger"], done.stdout
