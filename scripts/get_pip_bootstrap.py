# Stand-in for https://ci-files.testing.ansible.com/ansible-test/get-pip-<version>.py, which this network
# cannot reach: ansible-test documents saving a bootstrap script to its cache instead. scripts/sanity.sh saves
# this one there with OUTER set to the checkout's .venv/bin/python, whose pip (22.3 or later) installs the pip
# version ansible-test asks for straight into this interpreter's empty venv (`pip --python`): about 3 s for each
# of the nine venvs of a fresh sanity run. Without it, the interpreter's own ensurepip bootstraps an older pip
# (and setuptools) first, which then upgrades itself: about 8 s each.
import os
import subprocess
import sys

OUTER = "@OUTER_PYTHON@"
args = [a for a in sys.argv[1:] if a not in ("--no-setuptools", "--no-wheel")]
if os.path.isfile(OUTER):
    subprocess.check_call([OUTER, "-m", "pip", "--python", sys.executable, "install"] + args)
else:
    subprocess.check_call([sys.executable, "-m", "ensurepip", "--default-pip"])
    subprocess.check_call([sys.executable, "-m", "pip", "install"] + args)
