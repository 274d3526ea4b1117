# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The bash scripts of a launch, generated in Python (no Jinja on the box): the run wrapper (with the environment
its command runs in) and the queue runner, and the block that resumes the job from a platform's onstart hook.

The two scripts are written to the job directory as new versioned files, ``run-item-<sha12>.sh`` and
``queue-<sha12>.sh``, never over one that may be running (bash reads a running script by byte offset). Pure: the
same inputs give the same bytes, so an unchanged launch writes nothing. The filter
``remote_gpu.trainer.launch_scripts`` calls :func:`scripts`, ``remote_gpu.trainer.launch_onstart``
:func:`onstart_block`.
"""

from __future__ import annotations

import hashlib
import shlex

from ansible_collections.remote_gpu.trainer.plugins.module_utils.job_layout import tmux_session

LAUNCH_CLI = "ansible_collections.remote_gpu.trainer.plugins.module_utils.launch"
SAMPLER_CLI = "ansible_collections.remote_gpu.trainer.plugins.module_utils.sampler"
GATE_CLI = "ansible_collections.remote_gpu.trainer.plugins.module_utils.item_gate"
GATE_REFUSED_EXIT = 75  # item_gate.REFUSED_EXIT (not imported: the filter needs none of the gate's GPU code)

q = shlex.quote


def versioned_name(kind, text):
    """``<kind>-<first 12 hex digits of the text's sha256>.sh``."""
    return "%s-%s.sh" % (kind, hashlib.sha256(text.encode("utf-8")).hexdigest()[:12])


def _as_list(value):
    if value is None:
        return []
    return [value] if isinstance(value, str) else list(value)


def thread_count(cpu):
    """The thread count for OMP_NUM_THREADS and MKL_NUM_THREADS from env_audit's ``cgroup`` result (cpu_quota,
    affinity_cpus, host_cpus, recommended_threads) -> an int, or None when the container may use every core of
    the host (then torch and OpenMP already size their pools right, and nothing is exported)."""
    cpu = cpu or {}
    threads, host = cpu.get("recommended_threads"), cpu.get("host_cpus")
    if not isinstance(threads, int) or isinstance(threads, bool) or threads < 1:
        return None
    if isinstance(host, int) and threads >= host:
        return None
    return threads


def job_env_lines(env_prefix="", conda_activate=False, threads=None):
    """Bash lines that define ``job_env``, the environment the item's command runs in (called in its subshell):
    conda's base environment of ``env_prefix`` activated (``conda_activate``), ``<env_prefix>/bin`` first on PATH
    (a non-login SSH shell has no conda on its PATH, so a bare ``python`` would not be the image's), and
    OMP_NUM_THREADS / MKL_NUM_THREADS = ``threads`` unless the job's environment already sets them."""
    lines = ["# The command's environment: the image's interpreter environment first on PATH, CPU threads from the",
             "# cgroup quota. Prints nothing unless something is missing.",
             "job_env() {"]
    if env_prefix:
        lines += [
            "    local prefix=%s" % q(env_prefix.rstrip("/") or "/"),
            '    if [ ! -d "$prefix/bin" ]; then',
            '        echo "trainer: the interpreter environment $prefix/bin does not exist, so the command runs with'
            ' PATH=$PATH: set trainer_env_prefix (or launch_env_prefix) to the image\'s environment"',
            "    else",
        ]
        if conda_activate:
            lines += [
                '        if [ ! -r "$prefix/etc/profile.d/conda.sh" ]; then',
                '            echo "trainer: no conda in $prefix ($prefix/etc/profile.d/conda.sh is missing), so conda'
                ' base is not activated; $prefix/bin is first on PATH"',
                "        else",
                "            set +u  # conda's shell functions read unset variables",
                '            . "$prefix/etc/profile.d/conda.sh" && conda activate base ||',
                '                echo "trainer: conda activate base failed in $prefix; $prefix/bin is first on PATH"',
                "        fi",
            ]
        lines += [
            '        case "$PATH" in',
            '            "$prefix/bin:"*) ;;',
            '            *) PATH="$prefix/bin:$PATH" ;;',
            "        esac",
            "        export PATH",
            "    fi",
        ]
    if threads:
        lines += [
            '    [ -n "${OMP_NUM_THREADS+set}" ] || export OMP_NUM_THREADS=%d' % int(threads),
            '    [ -n "${MKL_NUM_THREADS+set}" ] || export MKL_NUM_THREADS=%d' % int(threads),
        ]
    lines += ["    return 0", "}"]
    return lines


def run_item_text(name, host, command, dest, output_root, durable_root, run_id, best, scratch, job_dir, python,
                  lib_dir, env_prefix="", conda_activate=False, threads=None, tensorboard_dir="", protocol_dir="",
                  wandb_dir="", adopt=False):
    """The run wrapper: ``run-item-<sha>.sh ITEM_ID ARGUMENT`` runs one queue item, then the finish step (which
    also syncs the run's record: ``tensorboard_dir``, ``protocol_dir`` and the item's ``$WANDB_DIR``,
    ``<wandb_dir>/<item>``, when set). With ``adopt`` (a replacement box's relaunch), an item whose verified copy an
    earlier box left on the durable tier is taken as done instead of run."""
    lines = [
        "#!/usr/bin/env bash",
        "# Run wrapper of job %s, written by the remote_gpu.trainer launch role. Never edited in place: a changed"
        % name,
        "# command or setting gets a new run-item-<sha>.sh (bash reads a running script by byte offset).",
        "#",
        "# Usage: run-item-<sha>.sh ITEM_ID ARGUMENT",
        "# Runs \"%s ARGUMENT\" in %s for one queue item, output in its own directory. Then" % (command, dest),
        "# (the launch module_utils \"finish\" step, with the profile's interpreter): writes a provisional",
        "# items/<id>/status.json (failed, until the step completes); on exit 0, copies the files matching the best",
        "# patterns to the durable tier with the checked_sync core and verifies them, prunes the scratch patterns",
        "# only after that, writes the final status.json with the exit code, times, item, synced files and the code",
        "# record, and prints the success line last. Exit status: 0 only when the command succeeded and the sync",
        "# was verified.",
        "set -u",
        "ID=$1",
        "ARG=${2-}",
        "JOB_DIR=%s" % q(job_dir),
        "CODE_DIR=%s" % q(dest),
        "COMMAND=%s" % q(command),
        'OUT=%s/"$ID"' % q(output_root),
        "DURABLE=%s" % q(durable_root),
        "PY=%s" % q(python),
        "LIB=%s" % q(lib_dir),
        'ITEM_DIR="$JOB_DIR/items/$ID"',
        'STATUS="$ITEM_DIR/status.json"',
        "now() { date -u +%Y-%m-%dT%H:%M:%SZ; }",
    ] + job_env_lines(env_prefix, conda_activate, threads) + [
        "",
        "# An item that trained but failed to sync retries only its sync (launch resync), never its command.",
        'PYTHONPATH="$LIB" "$PY" -m %s resync "$STATUS" && exit 0' % LAUNCH_CLI,
        'grep -qs \'"state": "sync_failed"\' "$STATUS" && exit 1',
    ] + ([
        "# An item done on an earlier box whose verified copy is on this durable tier (a replacement) is not run again.",
        'if [ -n "$DURABLE" ]; then',
        '    PYTHONPATH="$LIB" "$PY" -m %s adopt "$STATUS" "$DURABLE/$ID" && exit 0' % LAUNCH_CLI,
        "fi",
    ] if adopt else []) + [
        'mkdir -p "$ITEM_DIR" "$OUT" || { echo "==== trainer: item $ID cannot create $ITEM_DIR or $OUT ===="; '
        'exit 1; }',
        'rm -f "$STATUS"',
        "STARTED=$(now)",
        "printf '%s\\n' \"$STARTED\" > \"$ITEM_DIR/started\"",
        "printf '==== trainer: item %s started %s: %s ====\\n' \"$ID\" \"$STARTED\" \"$ARG\"",
        'export TRAINER_ITEM="$ID" TRAINER_ITEM_ARG="$ARG" TRAINER_OUTPUT_DIR="$OUT" TRAINER_RUN_ID=%s' % q(run_id),
        "# where the item's verified copy goes: a checkpoint written there survives the box (resume from it)",
        'if [ -n "$DURABLE" ]; then',
        '    export TRAINER_DURABLE_DIR="$DURABLE/$ID"',
        "fi",
    ] + ([
        "# wandb writes the item's runs (offline ones included) here; the finish step syncs them with the best files",
        'export WANDB_DIR=%s/"$ID"' % q(wandb_dir),
        'mkdir -p "$WANDB_DIR" || echo "==== trainer: cannot create $WANDB_DIR ===="',
    ] if wandb_dir else []) + [
        "",
        'SIG=""',
        "trap 'SIG=143' TERM",
        "trap 'SIG=130' INT",
        "trap 'SIG=129' HUP",
        '( cd "$CODE_DIR" && job_env && exec bash -c "$COMMAND $ARG" ) < /dev/null &',
        "CHILD=$!",
        "printf '%s\\n' \"$CHILD\" > \"$JOB_DIR/main.pid\"",
        'wait "$CHILD"',
        "RC=$?",
        'while kill -0 "$CHILD" 2>/dev/null; do',
        '    wait "$CHILD"',
        "    RC=$?",
        "done",
        'rm -f "$JOB_DIR/main.pid"',
        'if [ -n "$SIG" ]; then',
        "    RC=$SIG",
        "fi",
        "",
        'set -- --item "$ID" --arg "$ARG" --exit-code "$RC" --started "$STARTED" --output-dir "$OUT" '
        '--status "$STATUS" \\',
        '    --code "$JOB_DIR/code.json" --host %s' % q(host),
        'if [ -z "$SIG" ] && [ -n "$DURABLE" ]; then',
        '    set -- "$@" --sync-dest "$DURABLE/$ID"',
    ]
    lines += ['    set -- "$@" --best %s' % q(pattern) for pattern in _as_list(best)]
    lines += ['    set -- "$@" --scratch %s' % q(pattern) for pattern in _as_list(scratch)]
    records = (("--tb-dir", tensorboard_dir), ("--protocol-dir", protocol_dir), ("--wandb-dir", wandb_dir))
    lines += ['    set -- "$@" %s %s' % (flag, q(path)) for flag, path in records if path]
    lines += [
        "fi",
        "# The finish step writes the item's status (job_layout.write_status) before anything that can fail.",
        'PYTHONPATH="$LIB" "$PY" -m %s finish "$@"' % LAUNCH_CLI,
        "FIN=$?",
        'if [ ! -s "$STATUS" ]; then',
        '    echo "==== trainer: item $ID FAILED: the finish step exited $FIN and wrote no $STATUS ===="',
        '    [ "$FIN" -eq 0 ] && FIN=1',
        "fi",
        'exit "$FIN"',
        "",
    ]
    return "\n".join(lines)


def gate_lines(gate):
    """The queue runner's lines that run the item gate (module_utils/item_gate.py) before an item: ``gate`` holds
    ``data`` and ``durable`` (directories), the budget (``data_bytes``, ``data_inodes``, ``durable_bytes``,
    ``durable_inodes``), ``gpu_mib``, ``accept_slowdown`` and ``gpu`` (false in environment-only mode: the disks
    only). A refused item stops the queue with GATE_REFUSED_EXIT
    before it starts; a gate that cannot run (exit 2, or a missing interpreter) lets the item start."""
    if not gate:
        return []
    words = ["--job-dir", '"$JOB_DIR"', "--item", '"$ID"', "--runner-pid", "$$", "--data", q(str(gate["data"]))]
    if gate.get("durable"):
        words += ["--durable", q(str(gate["durable"]))]
    for key in ("data_bytes", "data_inodes", "durable_bytes", "durable_inodes", "gpu_mib"):
        if gate.get(key) is not None:
            words += ["--" + key.replace("_", "-"), str(int(gate[key]))]
    if gate.get("accept_slowdown"):
        words.append("--accept-slowdown")
    if gate.get("gpu") is False:
        words.append("--no-gpu")
    return [
        "    # The item gate: disk budget, foreign GPU memory, new fatal Xids, active slowdown (item_gate.py).",
        '    PYTHONPATH="$LIB" "$PY" -m %s %s' % (GATE_CLI, " ".join(words)),
        "    GATE=$?",
        '    if [ "$GATE" -eq %d ]; then' % GATE_REFUSED_EXIT,
        '        echo "==== trainer: queue paused before item $ID (item gate refused it; $JOB_DIR/%s says why):'
        ' fix the cause and relaunch, the queue resumes there ===="' % "gate-refused.json",
        "        exit %d" % GATE_REFUSED_EXIT,
        "    fi",
    ]


def queue_text(name, host, items, run_item_path, job_dir, python, lib_dir, sampler=False, sampler_interval=5,
               gate=None):
    """The queue runner of one host: runs its ``items`` ({item, arg} dicts) in order with the run wrapper,
    skipping the items whose status says exit code 0. Exit 0 when every item is done, 1 otherwise, 128+N on
    signal N. With ``sampler``, the sampler sidecar (module_utils/sampler.py) runs beside it. With ``gate``
    (gate_lines), each item passes the item gate first; a refusal stops the queue with exit GATE_REFUSED_EXIT."""
    lines = [
        "#!/usr/bin/env bash",
        "# Queue runner of job %s on %s, written by the remote_gpu.trainer launch role. Never" % (name, host),
        "# edited in place: a changed queue or setting gets a new queue-<sha>.sh.",
        "#",
        "# Runs this host's items in order with the run wrapper, skipping every item whose items/<id>/status.json says",
        "# exit code 0, so a relaunch resumes at the first unfinished item. A failed item does not stop the queue.",
        "# Exit status: 0 when every item of this host is done, 1 otherwise, 128+N when stopped by signal N%s." % (
            ", %d when the item gate refused the next item" % GATE_REFUSED_EXIT if gate else ""),
        "set -u",
        "JOB_DIR=%s" % q(job_dir),
        "RUN_ITEM=%s" % q(run_item_path),
        "PY=%s" % q(python),
        "LIB=%s" % q(lib_dir),
        "IDS=(%s )" % "".join(" " + q(str(row["item"])) for row in items),
        "ARGS=(%s )" % "".join(" " + q(str(row["arg"])) for row in items),
        "",
        'STOP=""',
        "trap 'STOP=143' TERM",
        "trap 'STOP=130' INT",
        "trap 'STOP=129' HUP",
    ]
    if sampler:
        lines += [
            "",
            "# Sampler sidecar: every %d s one line into samples.tsv (UTC time, item, the job cgroup's memory, the"
            % int(sampler_interval),
            "# running item's main PID and RSS, GPU utilisation and memory); it stops when this runner is gone.",
            'PYTHONPATH="$LIB" "$PY" -m %s --job-dir "$JOB_DIR" --interval %d --runner-pid $$ &'
            % (SAMPLER_CLI, int(sampler_interval)),
            "SAMPLER=$!",
            "trap 'kill \"$SAMPLER\" 2>/dev/null' EXIT",
        ]
    lines += [
        "",
        'echo "==== trainer: queue of %d item(s) on %s: ${IDS[*]} ===="' % (len(items), host),
        "FAILED=0",
        'for i in "${!IDS[@]}"; do',
        '    [ -n "$STOP" ] && break',
        "    ID=${IDS[$i]}",
        '    if PYTHONPATH="$LIB" "$PY" -m %s done \\' % LAUNCH_CLI,
        '            "$JOB_DIR/items/$ID/status.json"; then',
        '        echo "==== trainer: item $ID already done, skipped ===="',
        "        continue",
        "    fi",
    ] + gate_lines(gate) + [
        "    printf '%s\\n' \"$ID\" > \"$JOB_DIR/current.item\"",
        '    bash "$RUN_ITEM" "$ID" "${ARGS[$i]}" &',
        "    CHILD=$!",
        '    wait "$CHILD"',
        "    RC=$?",
        '    while kill -0 "$CHILD" 2>/dev/null; do',
        '        wait "$CHILD"',
        "        RC=$?",
        "    done",
        '    rm -f "$JOB_DIR/current.item"',
        '    if [ "$RC" -ne 0 ]; then',
        "        FAILED=$((FAILED + 1))",
        "    fi",
        "done",
        'if [ -n "$STOP" ]; then',
        '    echo "==== trainer: queue stopped by signal, exit $STOP ===="',
        '    exit "$STOP"',
        "fi",
        'echo "==== trainer: queue finished, $FAILED item(s) failed ===="',
        '[ "$FAILED" -eq 0 ]',
        "",
    ]
    return "\n".join(lines)


def scripts(items, name, host, command, dest, output_root, durable_root, run_id, best, scratch, job_dir, python,
            lib_dir, sampler=False, sampler_interval=5, env_prefix="", conda_activate=False, threads=None, gate=None,
            tensorboard_dir="", protocol_dir="", wandb_dir="", adopt=False):
    """Both scripts of one host -> [{kind, path, text}] (run-item first); the queue names the run wrapper
    by its versioned path."""
    if conda_activate and not env_prefix:
        raise ValueError("conda_activate needs env_prefix, the conda installation whose base environment to activate")
    if env_prefix and not env_prefix.startswith("/"):
        raise ValueError("env_prefix %r must be an absolute path" % env_prefix)
    run_item = run_item_text(name, host, command, dest, output_root, durable_root, run_id, best, scratch, job_dir,
                             python, lib_dir, env_prefix, conda_activate, threads, tensorboard_dir, protocol_dir,
                             wandb_dir, adopt)
    run_item_path = "%s/%s" % (job_dir.rstrip("/"), versioned_name("run-item", run_item))
    queue = queue_text(name, host, items, run_item_path, job_dir, python, lib_dir, sampler, sampler_interval, gate)
    queue_path = "%s/%s" % (job_dir.rstrip("/"), versioned_name("queue", queue))
    return [{"kind": "run-item", "path": run_item_path, "text": run_item},
            {"kind": "queue", "path": queue_path, "text": queue}]


def onstart_block(name, job_dir, wrapper, detach, python, lib_dir, ids):
    """The lines launch writes between its markers into the platform's onstart hook (vast.ai reruns /root/onstart.sh
    on every container start, and tmux dies with the old container): start the job's ``wrapper`` again, detached
    as launch started it (``detach``: tmux or nohup), unless the job still runs or every item in ``ids`` is done.
    The wrapper runs the queue runner, which skips the done items, so the queue resumes at its first unfinished
    item. It returns at once (the job is detached), and a failure never stops the rest of the hook."""
    session = tmux_session(name)
    func = "".join(ch if ch.isalnum() else "_" for ch in name)
    nohup = "setsid -f nohup bash %s > /dev/null 2>&1 < /dev/null" % q(wrapper)
    if detach == "tmux":
        start = ["    if command -v tmux > /dev/null && tmux new-session -d -s %s -c %s %s; then :"
                 % (q(session), q(job_dir), q("exec bash %s" % q(wrapper))),
                 "    else %s; fi" % nohup]
    elif detach == "nohup":
        start = ["    %s" % nohup]
    else:
        raise ValueError("detach must be tmux or nohup (what detached_job used), got %r" % (detach,))
    return "\n".join([
        "# Resumes the queue of job %s after a container restart; rewritten by each launch that starts the job." % name,
        "trainer_resume_%s() {" % func,
        "    local dir=%s pid start stat" % q(job_dir),
        '    if read -r pid < "$dir/job.pid" && read -r start < "$dir/job.starttime" &&',
        '            read -r stat < "/proc/$pid/stat" && set -- ${stat##*) } && [ "${20}" = "$start" ]; then',
        "        return 0  # the job runs",
        "    fi",
        "    tmux has-session -t %s 2> /dev/null && return 0" % q("=" + session),
        '    [ "$(cd "$dir" && PYTHONPATH=%s %s -m %s pending "$dir/items"%s 2> /dev/null)" = "[]" ] && return 0'
        % (q(lib_dir), q(python), LAUNCH_CLI, "".join(" " + q(str(i)) for i in ids)),
        '    cd "$dir" || return 0',
    ] + start + [
        "}",
        "(trainer_resume_%s) || echo %s >&2" % (
            func, q("trainer: job %s was not resumed: run the playbook remote_gpu.trainer.launch again" % name)),
    ])
