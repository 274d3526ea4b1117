"""Raw job_status results and patrol records shared by the fleet_patrol and fleet_prom tests."""

from __future__ import annotations


def job(**kw):
    base = {"name": "train", "exists": True, "alive": True, "pid": 812, "items_done": 3, "items_failed": 0,
            "items_total": 7, "last_exit_code": None,
            "progress": {"text": "Epoch 12/20", "unit": "epoch", "value": 12, "total": 20, "line_no": 40},
            "crash_markers": [], "crash_marker_count": 0, "log_path": "/root/.trainer/jobs/train/job.log",
            "log_exists": True, "log_age_seconds": 20, "tail": ["epoch 11", "epoch 12"], "vanished_reason": None}
    base.update(kw)
    return base


def probe(jobs, findings=(), data=(3, 1), durable=(40, 91)):
    return {"status": "PASS", "changed": False, "jobs": jobs, "findings": list(findings),
            "paths": [{"path": "/root/autodl-tmp", "exists": True, "bytes_pct": data[0], "inodes_pct": data[1]},
                      {"path": "/root/autodl-fs", "exists": True, "bytes_pct": durable[0], "inodes_pct": durable[1]}],
            "gpus": [{"index": 0, "utilization_pct": 97, "memory_used_mib": 70211, "memory_total_mib": 81559}],
            "oom_kills": {"path": "/sys/fs/cgroup/memory.events", "counters": {"oom_kill": 2}}}


def patrol_record(result):
    return {"platform": "autodl", "data_dir": "/root/autodl-tmp", "durable_dir": "/root/autodl-fs", "probe": result}


def finding_of(level, code, message="evidence", job_name="train"):
    return {"level": level, "code": code, "message": message, "action": "act", "job": job_name}
