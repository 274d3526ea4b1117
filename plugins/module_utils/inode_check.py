# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Bytes and inodes of a filesystem, threshold findings, budgets and the largest inode consumers.

Everything here is standard library only, so it runs on the rented box's interpreter.
"""

from __future__ import annotations

import os
import stat

from ansible_collections.remote_gpu.trainer.plugins.module_utils.findings import finding


def percent(used, free):
    """Used share as df computes it: used / (used + available), rounded up; None when unknown."""
    total = used + free
    if total <= 0:
        return None
    return -(-used * 100 // total)


def usage_from_statvfs(path, st):
    """Turn an ``os.statvfs`` result into the numbers df and df -i show for ``path``.

    Bytes use the space available to unprivileged users (``f_bavail``), like df. Filesystems that do
    not track inodes (``f_files == 0``: btrfs, many FUSE and network filesystems) report inodes as None.
    """
    block = st.f_frsize or st.f_bsize
    bytes_total = st.f_blocks * block
    bytes_free = st.f_bavail * block
    bytes_used = (st.f_blocks - st.f_bfree) * block
    usage = {
        "path": path,
        "exists": True,
        "bytes_total": bytes_total,
        "bytes_used": bytes_used,
        "bytes_free": bytes_free,
        "bytes_pct": percent(bytes_used, bytes_free),
        "inodes_total": None,
        "inodes_used": None,
        "inodes_free": None,
        "inodes_pct": None,
    }
    if st.f_files > 0:
        inodes_used = st.f_files - st.f_ffree
        usage.update(
            inodes_total=st.f_files,
            inodes_used=inodes_used,
            inodes_free=st.f_favail,
            inodes_pct=percent(inodes_used, st.f_favail),
        )
    return usage


def missing_usage(path):
    """The same keys as usage_from_statvfs, for a path that does not exist."""
    keys = ("bytes_total", "bytes_used", "bytes_free", "bytes_pct",
            "inodes_total", "inodes_used", "inodes_free", "inodes_pct")
    usage = dict.fromkeys(keys)
    usage.update(path=path, exists=False)
    return usage


def human_bytes(value):
    """1536 -> '1.5 KiB'; for messages only."""
    amount = float(value)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(amount) < 1024 or unit == "TiB":
            return ("%d %s" % (amount, unit)) if unit == "B" else ("%.1f %s" % (amount, unit))
        amount /= 1024
    return "%d B" % value  # pragma: no cover


def threshold_findings(usage, warn_pct, fail_pct):
    """Findings for one path: path_missing, bytes_high, inodes_high, inodes_exhausted."""
    path = usage["path"]
    if not usage["exists"]:
        return [finding("FAIL", "path_missing", "%s does not exist" % path,
                        "Create or mount %s, or fix the path in the platform profile." % path, path=path)]
    found = []
    bytes_pct = usage["bytes_pct"]
    if bytes_pct is not None and bytes_pct >= warn_pct:
        level = "FAIL" if bytes_pct >= fail_pct else "WARN"
        found.append(finding(
            level, "bytes_high",
            "%s is %d%% full by bytes (%s free of %s)" % (
                path, bytes_pct, human_bytes(usage["bytes_free"]), human_bytes(usage["bytes_total"])),
            "Free space on %s (old checkpoints, caches) or move outputs to a larger tier." % path, path=path))
    inodes_pct = usage["inodes_pct"]
    if inodes_pct is not None and (inodes_pct >= warn_pct or usage["inodes_free"] == 0):
        exhausted = inodes_pct >= fail_pct or usage["inodes_free"] == 0
        found.append(finding(
            "FAIL" if exhausted else "WARN",
            "inodes_exhausted" if exhausted else "inodes_high",
            "%s has used %d%% of its inodes (%d free of %d)" % (
                path, inodes_pct, usage["inodes_free"], usage["inodes_total"]),
            "New files will fail with 'No space left on device' even with bytes free: pack small files "
            "(tar, a zip, or one array file) or delete per-sample outputs under %s." % path, path=path))
    return found


def budget_findings(usage, label, need_bytes, need_inodes):
    """Findings for a projected need (checkpoints x keep + scratch, expected file count) on one path."""
    if not usage["exists"]:
        return []
    found = []
    if need_bytes and usage["bytes_free"] is not None and need_bytes > usage["bytes_free"]:
        found.append(finding(
            "FAIL", "budget_bytes_short",
            "%s needs %s on %s, %s free" % (
                label, human_bytes(need_bytes), usage["path"], human_bytes(usage["bytes_free"])),
            "Free space, keep fewer checkpoints, or rent a larger disk before launching.",
            path=usage["path"]))
    if need_inodes and usage["inodes_free"] is not None and need_inodes > usage["inodes_free"]:
        found.append(finding(
            "FAIL", "budget_inodes_short",
            "%s needs %d inodes on %s, %d free" % (label, need_inodes, usage["path"], usage["inodes_free"]),
            "Pack exported files into archives or shards, or write them to a tier with more inodes.",
            path=usage["path"]))
    return found


def top_inode_consumers(path, limit, one_filesystem=True):
    """The ``limit`` children of ``path`` that hold the most inodes, like ``du --inodes -d1``.

    Each entry counts itself and everything below it; symlinks are not followed. With
    ``one_filesystem`` the walk does not descend into other mounts (like ``du -x``). Unreadable
    directories are counted as one entry and listed in ``errors``. Returns (rows, errors).
    """
    errors = []
    try:
        root_dev = os.lstat(path).st_dev
    except OSError as exc:
        return [], ["%s: %s" % (path, exc.strerror)]
    rows = []
    try:
        children = list(os.scandir(path))
    except OSError as exc:
        return [], ["%s: %s" % (path, exc.strerror)]
    for child in children:
        count = 1
        if child.is_dir(follow_symlinks=False):
            count += _count_below(child.path, root_dev if one_filesystem else None, errors)
        rows.append({"path": child.path, "inodes": count})
    rows.sort(key=lambda row: (-row["inodes"], row["path"]))
    return rows[:limit], errors


def _count_below(top, device, errors):
    """Number of entries below directory ``top`` (not counting ``top``), iteratively."""
    total = 0
    stack = [top]
    while stack:
        current = stack.pop()
        try:
            if device is not None and os.lstat(current).st_dev != device:
                continue
            with os.scandir(current) as entries:
                for entry in entries:
                    total += 1
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(entry.path)
        except OSError as exc:
            errors.append("%s: %s" % (current, exc.strerror))
    return total


def tree_bytes(path):
    """Apparent size in bytes of the files below ``path`` (symlinks not followed), and the file count."""
    total = files = 0
    stack = [path]
    while stack:
        current = stack.pop()
        try:
            with os.scandir(current) as entries:
                for entry in entries:
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(entry.path)
                    elif entry.is_file(follow_symlinks=False):
                        total += entry.stat(follow_symlinks=False).st_size
                        files += 1
        except OSError:
            continue
    return total, files


def hf_cache_findings(report, warn_bytes, label="the Hugging Face cache"):
    """hf_cache_large: a big Hugging Face cache (``label``: which one) that sits on the home (system) disk instead of
    the data disk."""
    if not report or not report["exists"] or report["bytes"] is None or report["bytes"] < warn_bytes:
        return []
    if report["other_filesystem"]:
        return []
    return [finding(
        "WARN", "hf_cache_large",
        "%s %s holds %s on the home filesystem%s" % (
            label, report["path"], human_bytes(report["bytes"]),
            (" (largest: %s)" % report["models"][0]["name"]) if report["models"] else ""),
        "Move it to the data disk and point HF_HOME there (the hf_mirror role does), or delete models you no "
        "longer need; the system disk is small and fills up first.", path=report["path"])]


def hf_cache_report(cache_path, home):
    """Where the Hugging Face cache lives and how big it is.

    ``other_filesystem`` is True when the cache (after resolving a symlink) sits on a different
    filesystem than ``home``: the usual trick of symlinking it onto the data disk.
    """
    report = {"path": cache_path, "exists": False, "is_symlink": False, "target": None,
              "other_filesystem": None, "bytes": None, "files": None, "models": []}
    try:
        link = os.lstat(cache_path)
    except OSError:
        return report
    report["is_symlink"] = stat.S_ISLNK(link.st_mode)
    target = os.path.realpath(cache_path)
    report["target"] = target
    try:
        target_dev = os.stat(target).st_dev
    except OSError:
        return report  # a dangling symlink: it "exists" as a link only
    report["exists"] = True
    try:
        report["other_filesystem"] = target_dev != os.stat(home).st_dev
    except OSError:
        report["other_filesystem"] = None
    report["bytes"], report["files"] = tree_bytes(target)
    hub = os.path.join(target, "hub")
    models = []
    if os.path.isdir(hub):
        for entry in os.scandir(hub):
            if entry.name.startswith(("models--", "datasets--")) and entry.is_dir(follow_symlinks=False):
                size, _count = tree_bytes(entry.path)
                models.append({"name": entry.name, "bytes": size})
    models.sort(key=lambda row: (-row["bytes"], row["name"]))
    report["models"] = models
    return report


def mount_point(path):
    """The mount point of the filesystem that holds ``path`` (the highest parent on the same device)."""
    current = os.path.realpath(path)
    device = os.stat(current).st_dev
    while current != os.path.dirname(current):
        parent = os.path.dirname(current)
        if os.stat(parent).st_dev != device:
            break
        current = parent
    return current


def _device(path):
    try:
        return os.stat(path).st_dev
    except OSError:
        return None


def separation_findings(durable_dir, tiers, device=_device, mount=mount_point):
    """durable_not_separate (WARN): ``durable_dir`` shares a filesystem with a storage tier that the profile says is
    lost on some verb (``lost_on``), so what is synced there dies with that tier. RunPod's container disk is the case
    in point: its durable tier exists only when a Network Volume is mounted at ``/workspace``.

    ``tiers`` are the profile's ``trainer_storage_tiers`` (name, path, lost_on, note). Tiers at the durable path
    itself, tiers lost on nothing, and paths that do not exist are not compared."""
    if not durable_dir:
        return []
    durable_dev = device(durable_dir)
    if durable_dev is None:
        return []
    here = os.path.normpath(durable_dir)
    notes = [t.get("note") for t in tiers if os.path.normpath(t["path"]) == here and not t.get("lost_on")]
    notes += [t.get("note") for t in tiers if t.get("name") == "durable"]  # where the profile says it should be
    notes = [note for note in notes if note]
    found = []
    for tier in tiers:
        if not tier.get("lost_on") or os.path.normpath(tier["path"]) == here or device(tier["path"]) != durable_dev:
            continue
        name = tier.get("name") or tier["path"]
        found.append(finding(
            "WARN", "durable_not_separate",
            "the durable tier %s is on the same filesystem as the %s tier %s%s (mounted at %s), which is lost on %s: "
            "files synced there die with it" % (
                durable_dir, name, tier["path"], (" (%s)" % tier["note"]) if tier.get("note") else "",
                mount(durable_dir), ", ".join(tier["lost_on"])),
            "Give trainer_durable_dir a filesystem that survives the meter-stop verb%s, or pull every result to the "
            "controller before teardown." % ((" (the profile's durable tier: %s)" % notes[0]) if notes else ""),
            path=durable_dir))
    return found


def path_usages(paths, warn_pct, fail_pct):
    """(usage of each path, findings): statvfs of each, a missing path as missing_usage, an unreadable one as
    ``path_unreadable``, and the thresholds of the rest."""
    usages, findings = [], []
    for path in paths:
        try:
            try:
                usage = usage_from_statvfs(path, os.statvfs(path))
            except (FileNotFoundError, NotADirectoryError):
                usage = missing_usage(path)  # threshold_findings reports it (path_missing)
        except OSError as exc:
            usage = missing_usage(path)
            findings.append(finding("WARN", "path_unreadable", "cannot statvfs %s: %s" % (path, exc.strerror),
                                    "Check the mount.", path=path))
        else:
            findings.extend(threshold_findings(usage, warn_pct, fail_pct))
        usages.append(usage)
    return usages, findings


# The walk that names a full disk's largest consumers: at most this many entries in all (a disk full of inodes
# holds millions); past it the sizes are lower bounds (``truncated``).
MAX_CONSUMER_ENTRIES = 200000
CHECKPOINT_SUFFIXES = (".pt", ".pth", ".ckpt", ".safetensors", ".bin", ".pkl", ".npz", ".h5")
SMALL_FILE_BYTES = 256 * 1024


def _names(path):
    try:
        with os.scandir(path) as entries:
            return [(entry.name, entry.is_dir(follow_symlinks=False)) for entry in entries]
    except OSError:
        return []


def consumer_kind(path, files=0, size=0, checkpoint_files=0):
    """What a directory under a full disk is, by its name and its first level (pure but for that listing):
    ``hf_cache``, ``pip_cache``, ``checkpoints``, ``per_sample`` (many small files) or ``other``."""
    base = os.path.basename(os.path.normpath(path))
    children = _names(path)
    names = set(name for name, _is_dir in children)
    if base.startswith(("models--", "datasets--")):
        return "hf_cache"
    if any(name.startswith(("models--", "datasets--")) for name in names) or (
            "hub" in names and any(n.startswith(("models--", "datasets--")) for n, _d in _names(os.path.join(path, "hub")))):
        return "hf_cache"
    if base in ("huggingface", "hf_home", "hf-home", "hf_cache", "hf-cache"):
        return "hf_cache"
    if base == "pip" or ("http" in names or "http-v2" in names) and "wheels" in names:
        return "pip_cache"
    if checkpoint_files and checkpoint_files * 2 >= files or base.startswith(("checkpoint", "ckpt")):
        return "checkpoints"
    if files >= 1000 and size <= files * SMALL_FILE_BYTES:
        return "per_sample"
    return "other"


def _q(text):
    return "'%s'" % text.replace("'", "'\\''")


def consumer_command(kind, path):
    """The exact command that clears or moves a consumer of ``kind`` at ``path`` (pure)."""
    if kind == "hf_cache":
        hub = os.path.join(path, "hub") if os.path.isdir(os.path.join(path, "hub")) else path
        return ("huggingface-cli delete-cache --dir %s (pick the models to delete), or move it to a larger disk "
                "and point HF_HOME there" % _q(hub))
    if kind == "pip_cache":
        return "PIP_CACHE_DIR=%s pip cache purge" % _q(path)
    if kind == "checkpoints":
        return ("ls -lt %s, then delete the checkpoints you no longer need (pull them first: "
                "the playbook remote_gpu.trainer.teardown)" % _q(path))
    if kind == "per_sample":
        return "tar -cf %s -C %s %s && rm -rf %s (one archive instead of one file per sample)" % (
            _q(path + ".tar"), _q(os.path.dirname(path)), _q(os.path.basename(path)), _q(path))
    return "du -sh %s, then move it to a larger tier or delete it" % _q(path)


def _measure(top, budget):
    """(bytes, inodes, files, checkpoint files, truncated) below ``top`` (itself counted), no symlink followed, one
    filesystem; ``budget`` is a one-item list of the entries left, shared by every call."""
    total = inodes = files = checkpoints = 0
    try:
        st = os.lstat(top)
    except OSError:
        return 0, 0, 0, 0, False
    inodes, device = 1, st.st_dev
    if not stat.S_ISDIR(st.st_mode):
        regular = stat.S_ISREG(st.st_mode)
        return (st.st_size if regular else 0), 1, int(regular), int(
            regular and top.endswith(CHECKPOINT_SUFFIXES)), False
    stack = [top]
    while stack:
        current = stack.pop()
        try:
            with os.scandir(current) as entries:
                for entry in entries:
                    if budget[0] <= 0:
                        return total, inodes, files, checkpoints, True
                    budget[0] -= 1
                    inodes += 1
                    try:
                        est = entry.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    if stat.S_ISDIR(est.st_mode):
                        if est.st_dev == device:
                            stack.append(entry.path)
                    elif stat.S_ISREG(est.st_mode):
                        total += est.st_size
                        files += 1
                        checkpoints += entry.name.endswith(CHECKPOINT_SUFFIXES)
        except OSError:
            continue
    return total, inodes, files, checkpoints, False


def largest_consumers(path, limit=3, max_entries=MAX_CONSUMER_ENTRIES, by="bytes"):
    """The ``limit`` (None: every one) largest children of ``path`` by ``by`` (``bytes`` or ``inodes``), a ``.cache``
    directory opened to its children (the HF and pip caches), each {"path", "bytes", "inodes", "kind", "command",
    "truncated"}.
    Bounded (``max_entries`` in all), never follows a symlink, stays on one filesystem. [] when it cannot be
    listed."""
    budget = [max_entries]
    tops = []
    for name, is_dir in _names(path):
        child = os.path.join(path, name)
        if is_dir and name == ".cache":
            tops.extend(os.path.join(child, sub) for sub, _d in _names(child))
        else:
            tops.append(child)
    rows = []
    for top in sorted(tops):
        size, inodes, files, checkpoints, truncated = _measure(top, budget)
        kind = consumer_kind(top, files, size, checkpoints) if os.path.isdir(top) and not os.path.islink(top) else (
            "checkpoints" if top.endswith(CHECKPOINT_SUFFIXES) else "other")
        rows.append({"path": top, "bytes": size, "inodes": inodes, "kind": kind,
                     "command": consumer_command(kind, top), "truncated": truncated})
    rows.sort(key=lambda row: (-row[by], row["path"]))
    return rows if limit is None else rows[:limit]


KIND_WORDS = {"hf_cache": "Hugging Face cache", "pip_cache": "pip cache", "checkpoints": "checkpoints",
              "per_sample": "per-sample files", "other": "directory"}


def name_hogs(found, consumers):
    """The threshold finding ``found`` (bytes_high, inodes_high, inodes_exhausted) with its disk's largest
    ``consumers`` (largest_consumers) named in its message and action, and listed in ``consumers`` (pure)."""
    if not consumers:
        return found
    named = ["%s %s (%s, %d inodes)" % (KIND_WORDS.get(row["kind"], row["kind"]), row["path"],
                                        human_bytes(row["bytes"]), row["inodes"]) for row in consumers]
    commands = ["%s: %s" % (row["path"], row["command"]) for row in consumers]
    return dict(found, message="%s; largest: %s" % (found["message"], ", ".join(named)),
                action="%s To clear or move the largest: %s." % (found["action"], "; ".join(commands)),
                consumers=consumers)


def with_hogs(findings, limit=3, max_entries=MAX_CONSUMER_ENTRIES, measure=largest_consumers):
    """Each disk threshold finding of ``findings`` with its disk's largest consumers named (name_hogs): by bytes for
    bytes_high, by inodes for the inode findings; one walk per path."""
    done = {}
    out = []
    for found in findings:
        code = found.get("code")
        if code not in ("bytes_high", "inodes_high", "inodes_exhausted") or not found.get("path"):
            out.append(found)
            continue
        by = "bytes" if code == "bytes_high" else "inodes"
        if found["path"] not in done:
            done[found["path"]] = measure(found["path"], None, max_entries, by)
        rows = sorted(done[found["path"]], key=lambda row: (-row[by], row["path"]))
        out.append(name_hogs(found, rows[:limit]))
    return out
