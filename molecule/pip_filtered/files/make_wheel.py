"""Write a minimal pure-Python wheel (stand-in packages for the pip_filtered scenario; no network, no setuptools).

usage: make_wheel.py OUTDIR NAME VERSION [REQUIRES ...]
"""

from __future__ import annotations

import base64
import hashlib
import pathlib
import sys
import zipfile


def record_line(path, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return "%s,sha256=%s,%d" % (path, digest, len(data))


def main(outdir, name, version, *requires):
    dist = "%s-%s" % (name.replace("-", "_"), version)
    files = {
        "%s/__init__.py" % name.replace("-", "_"): (
            '"""Lab stand-in for %s %s (the pip_filtered scenario)."""\n__version__ = "%s"\n' % (name, version, version)),
        "%s.dist-info/METADATA" % dist: "Metadata-Version: 2.1\nName: %s\nVersion: %s\n%s" % (
            name, version, "".join("Requires-Dist: %s\n" % r for r in requires)),
        "%s.dist-info/WHEEL" % dist: "Wheel-Version: 1.0\nGenerator: make_wheel.py\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    out = pathlib.Path(outdir) / ("%s-py3-none-any.whl" % dist)
    out.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zf:
        lines = []
        for path, text in files.items():
            data = text.encode()
            zf.writestr(path, data)
            lines.append(record_line(path, data))
        lines.append("%s.dist-info/RECORD,," % dist)
        zf.writestr("%s.dist-info/RECORD" % dist, "\n".join(lines) + "\n")
    print(out)


if __name__ == "__main__":
    main(*sys.argv[1:])
