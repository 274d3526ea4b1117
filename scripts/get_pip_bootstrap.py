# Stand-in for https://ci-files.testing.ansible.com/ansible-test/get-pip-<version>.py, which this network
# cannot reach: ansible-test documents saving a bootstrap script to its cache instead. This one bootstraps
# pip with the interpreter's own ensurepip, then installs the pip version ansible-test asks for from PyPI.
import subprocess
import sys

subprocess.check_call([sys.executable, "-m", "ensurepip", "--default-pip"])
args = [a for a in sys.argv[1:] if a not in ("--no-setuptools", "--no-wheel")]
subprocess.check_call([sys.executable, "-m", "pip", "install"] + args)
