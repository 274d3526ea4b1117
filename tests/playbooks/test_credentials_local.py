"""credentials on localhost with the `local` profile (no root, no lab): the secret never shows, even at -vvv --diff.

The lab scenario molecule/credentials covers the refusals and the shared FS; this one runs everywhere.
"""

from __future__ import annotations

import json
import subprocess

from pbhelpers import REPO, run_playbook

# quotes and a command substitution: the file must hold them literally, and nothing may run them
SECRET = "s3cr3t-local-7d1f'\"$(touch PWNED)"


def test_secret_never_shows_and_reaches_the_job_literally(tmp_path, local_inventory):
    playbook = tmp_path / "pb.yml"
    playbook.write_text(
        "- hosts: localhost\n  gather_facts: false\n  roles:\n    - role: remote_gpu.trainer.credentials\n"
        "      vars:\n        credentials_secrets: {WANDB_API_KEY: %s}\n" % json.dumps(SECRET))
    outputs = []
    for args in (["-vvv", "--diff"], ["-vvv", "--check", "--diff"]):
        proc = run_playbook(playbook, local_inventory, "-e", "@%s" % (REPO / "group_vars" / "local.yml"), *args,
                            HOME=str(tmp_path))
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
        outputs.append(proc.stdout + proc.stderr)
    assert all("s3cr3t-local" not in out for out in outputs), "the secret appears in the output"
    assert "changed=0" in outputs[1]
    secrets = tmp_path / ".trainer" / "credentials.env"
    assert secrets.stat().st_mode & 0o777 == 0o600
    got = subprocess.run(["bash", "-c", '. %s/.trainer/jobenv.sh; printf %%s "$WANDB_API_KEY"' % tmp_path],
                         capture_output=True, text=True, cwd=tmp_path, check=True)
    assert got.stdout == SECRET
    assert not (tmp_path / "PWNED").exists()
