# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Print, as one JSON object, the installed version of each package named on the command line (null if absent).

Runs on the box with the interpreter whose packages pip_filtered installs (python -c "$(cat this file)" NAME...),
because only that interpreter knows what it has installed. Standard library only.
"""

import json
import sys
from importlib import metadata


def versions(names):
    out = {}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


if __name__ == "__main__":
    print(json.dumps(versions(sys.argv[1:])))
