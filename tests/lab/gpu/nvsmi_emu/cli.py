"""Command line of the fake ``nvidia-smi``: argv -> view -> (stdout, stderr, exit code)."""
from __future__ import annotations

import os
import sys
import time

from . import render, runtime

NO_DRIVER_FILE = "no-driver__nvidia-smi-has-failed__exit9.txt"
MISMATCH_FILE = "driver-library-mismatch__nvml-535.161__exit18.txt"
# errors/no-devices-were-found__exit-UNVERIFIED.txt (the whole capture); exit 6 is the man page's, unverified
NO_DEVICES = "No devices were found\n"

# Messages for cases the corpus holds no capture of: marked as emulator text, exit 2 (man page: invalid argument).
UNKNOWN_FLAG = "nvidia-smi (lab emulator): invalid argument %r; no real capture of this message exists in " \
               "the corpus. Run 'nvidia-smi -h' for help.\n"
UNKNOWN_FIELD = "nvidia-smi (lab emulator): field %r is not a valid field to query for %s on driver %s; no " \
                "real capture of this message exists in the corpus.\n"


class Exit(Exception):
    def __init__(self, code, out="", err=""):
        super().__init__(code)
        self.code, self.out, self.err = code, out, err


def _data(name):
    with open(os.path.join(render.DATA, name), encoding="utf-8", newline="") as fh:
        return fh.read()


def _fail_no_driver():
    raise Exit(9, _data(NO_DRIVER_FILE))


class Args:
    def __init__(self):
        self.q = self.xml = self.listing = self.help = False
        self.display = None
        self.ids = None
        self.query_gpu = self.query_apps = self.fmt = None
        self.help_query = None
        self.sub = None
        self.count = None
        self.select = None


VALUE_OPTS = {"-d": "display", "--display": "display", "-i": "ids", "--id": "ids", "--query-gpu": "query_gpu",
              "--query-compute-apps": "query_apps", "--format": "fmt", "-c": "count", "--count": "count",
              "-s": "select", "--select": "select"}
FLAG_OPTS = {"-q": "q", "--query": "q", "-a": "q", "-x": "xml", "--xml-format": "xml", "-L": "listing",
             "--list-gpus": "listing", "-h": "help", "--help": "help"}


def parse_args(argv):
    a = Args()
    i = 0
    while i < len(argv):
        tok = argv[i]
        if tok in ("dmon",) and a.sub is None and i == 0:
            a.sub = tok
        elif tok in ("--help-query-gpu", "--help-query-compute-apps"):
            a.help_query = tok[len("--help-"):]
        elif "=" in tok and tok.split("=", 1)[0] in VALUE_OPTS:
            k, v = tok.split("=", 1)
            setattr(a, VALUE_OPTS[k], v)
        elif tok in VALUE_OPTS:
            if i + 1 >= len(argv):
                raise Exit(2, "", UNKNOWN_FLAG % tok)
            setattr(a, VALUE_OPTS[tok], argv[i + 1])
            i += 1
        elif tok in FLAG_OPTS:
            setattr(a, FLAG_OPTS[tok], True)
        elif tok.startswith("-") and len(tok) > 2 and not tok.startswith("--") and all(
                "-" + c in FLAG_OPTS for c in tok[1:]):
            for c in tok[1:]:  # combined short flags, e.g. -qx
                setattr(a, FLAG_OPTS["-" + c], True)
        else:
            raise Exit(2, "", UNKNOWN_FLAG % tok)
        i += 1
    return a


def _resolve(names, asked_list, what, driver):
    out = []
    for asked in asked_list:
        key = asked.strip()
        if key not in names:
            raise Exit(2, "", UNKNOWN_FIELD % (key, what, driver))
        out.append((key, names[key]))
    return out


def _select(cap, ids):
    if ids is None:
        return None
    sel = set()
    for part in ids.split(","):
        part = part.strip()
        for i, g in enumerate(cap.gpus):
            if part == str(i) or part == g.get("GPU UUID") or part.upper() == g.bus_id.upper():
                sel.add(i)
    if not sel:
        raise Exit(6, NO_DEVICES)
    return sel


def _help_text(prefix, driver):
    path = render._help_file(prefix, driver)
    with open(path, encoding="utf-8", newline="") as fh:
        return fh.read()


def run(argv):
    args = parse_args(argv)
    sdir = runtime.scenario_dir()
    if not sdir or not os.path.isdir(sdir) or runtime.marker("MARKER-no-driver"):
        _fail_no_driver()
    if runtime.marker("MARKER-driver-library-mismatch"):
        raise Exit(18, _data(MISMATCH_FILE))
    if runtime.marker("MARKER-no-devices"):
        raise Exit(6, NO_DEVICES)
    if runtime.marker("MARKER-hang"):
        while True:  # like nvidia-smi stuck in D state after Xid 45/119: only a kill ends it
            time.sleep(3600)
    from .model import load_capture
    try:
        cap = load_capture(sdir)
    except (OSError, ValueError, SyntaxError):
        _fail_no_driver()
    driver = cap.driver
    if args.help:
        return _help_text("nvidia-smi-h", driver)
    if args.help_query:
        return _help_text("help-" + args.help_query, driver)
    apps = runtime.registered_apps()
    procs = render.all_processes(cap, apps, runtime.pid_mode())
    sel = _select(cap, args.ids)
    if args.sub == "dmon":
        from . import dmon
        return dmon.render_dmon(cap, sel, args.count, args.select, args.display)
    if args.query_gpu is not None or args.query_apps is not None:
        if not args.fmt or not args.fmt.split(",")[0] == "csv":
            raise Exit(2, "", UNKNOWN_FLAG % ("--format=" + (args.fmt or "")))
        noheader, nounits = render.parse_format(args.fmt)
        if args.query_gpu is not None:
            names = render.valid_names("help-query-gpu", driver)
            req = _resolve(names, args.query_gpu.split(","), "--query-gpu", driver)
            return render.render_query_gpu(cap, req, noheader, nounits, sel)
        names = render.valid_names("help-query-compute-apps", driver)
        req = _resolve(names, args.query_apps.split(","), "--query-compute-apps", driver)
        return render.render_compute_apps(cap, procs, req, noheader, nounits)
    if args.listing:
        return render.render_list(cap)
    if args.q:
        if args.xml:
            from . import xmlmap
            return xmlmap.render_xml(cap, procs, sel)
        if args.display:
            if args.display.upper() == "PERFORMANCE":
                return render.render_q_performance(cap, sel)
            raise Exit(2, "", UNKNOWN_FLAG % ("-d " + args.display))
        return render.render_q(cap, procs, sel)
    if args.xml or args.display:
        raise Exit(2, "", UNKNOWN_FLAG % ("-x" if args.xml else "-d"))
    from . import table
    return table.render_table(cap, procs)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    try:
        out = run(argv)
        code, err = 0, ""
    except Exit as e:
        out, code, err = e.out, e.code, e.err
    if out:
        sys.stdout.write(out)
        sys.stdout.flush()
    if err:
        sys.stderr.write(err)
    return code


if __name__ == "__main__":
    sys.exit(main())
