"""Fleet layout (which instance is which platform, region, scenario, variants) and the Ansible inventory."""
from __future__ import annotations

import json
import os

from . import state as st

# Per platform: SSH user, the data disk (fast scratch), the durable FS shared per region (None: no shared
# FS on the box), extra directories, and environment the platform sets at creation. Paths come from
# /work/shared/platforms.md. "~" means the SSH user's home. Unknown platform names fall back to generic_ssh.
PLATFORMS = {
    "autodl": {"user": "root", "data": "/root/autodl-tmp", "durable": "/root/autodl-fs",
               "dirs": ["/root/tf-logs"], "turbo": True, "miniconda": True},
    # The platform's own id of the instance, in the session's environment (sshd's SetEnv; PID 1 is sshd here, whose
    # process title overwrites its own environ, so /proc/1/environ carries nothing), and on RunPod also in
    # /etc/rp_environment, as RunPod's start.sh exports it for SSH sessions. The values are the ids that
    # tests/lab/providers/fake_api.py gives the instance of the same index (runpod_pod(i), vastai_instance(i)), so a
    # fake record built for lab-0i names this box.
    "runpod": {"user": "root", "data": "/workspace", "env": {"RUNPOD_POD_ID": "fakepod{index:04d}"},
               "env_file": "/etc/rp_environment"},
    "vastai": {"user": "root", "data": "/workspace", "env": {"CONTAINER_ID": "{vast_id}"}},
    "lambda": {"user": "ubuntu", "data": "~/proj", "durable": "/lambda/nfs/lab"},
    "generic_ssh": {"user": "root", "data": "~/proj"},
    "local": {"user": "root", "data": "~/proj"},
}
VARIANTS = ("no-tmux", "autodl-image", "non-root", "down", "slow")
DEFAULT_SCENARIO = os.environ.get("LAB_DEFAULT_SCENARIO", "h100-idle")
MAX_SIZE = 128

# Default layout: the first five slots, then round-robin over the last four.
# lab-01/lab-02 share autodl region A (durable-FS sharing), lab-03 is runpod, lab-04 is autodl region B
# (a different region must not see region A's durable FS), lab-05 is generic_ssh.
_FIRST = [("autodl", "A"), ("autodl", "A"), ("runpod", None), ("autodl", "B"), ("generic_ssh", None)]
_CYCLE = [("autodl", "A"), ("runpod", None), ("generic_ssh", None), ("autodl", "B")]


def host_name(i: int) -> str:
    return f"lab-{i:02d}"


def host_addr(i: int) -> str:
    """127.0.0.(10+i); LAB_NET=127.0.N moves a second fleet (its own LAB_STATE_DIR) to other addresses."""
    net = os.environ.get("LAB_NET", "127.0.0")
    return f"{net}.{10 + i}"


def platform_info(platform: str) -> dict:
    return PLATFORMS.get(platform, PLATFORMS["generic_ssh"])


def region_label(platform: str, region: str | None) -> str:
    if region:
        return region
    return "A" if platform_info(platform).get("durable") else "-"


def layout(size: int, platforms: dict, regions: dict, scenarios: dict, variants: dict) -> list:
    """One dict per instance. The override dicts map a host name (or 'all') to a value."""
    if not 1 <= size <= MAX_SIZE:
        raise ValueError(f"--size must be between 1 and {MAX_SIZE}")
    names = [host_name(i) for i in range(1, size + 1)]
    for opt, table in (("--platform", platforms), ("--region", regions), ("--scenario", scenarios),
                       ("--variant", variants)):
        unknown = sorted(set(table) - set(names) - {"all"})
        if unknown:
            raise ValueError(f"{opt} names {', '.join(unknown)}, not in this fleet ({names[0]}..{names[-1]})")
    out = []
    for i, name in enumerate(names, start=1):
        plat, region = _FIRST[i - 1] if i <= len(_FIRST) else _CYCLE[(i - len(_FIRST) - 1) % len(_CYCLE)]
        if name in platforms or "all" in platforms:
            plat = platforms.get(name, platforms.get("all"))
            region = None
        region = regions.get(name, regions.get("all", region))
        var = list(variants.get("all", [])) + list(variants.get(name, []))
        bad = [v for v in var if v not in VARIANTS]
        if bad:
            raise ValueError(f"unknown variant {', '.join(bad)} for {name}; known: {', '.join(VARIANTS)}")
        info = platform_info(plat)
        user = "ubuntu" if "non-root" in var else info["user"]
        home = "/root" if user == "root" else f"/home/{user}"
        data = info["data"].replace("~", home, 1)
        out.append({
            "name": name, "index": i, "addr": host_addr(i), "platform": plat,
            "region": region_label(plat, region),
            "scenario": scenarios.get(name, scenarios.get("all", DEFAULT_SCENARIO)),
            "variants": sorted(set(var), key=var.index), "user": user, "home": home, "data_dir": data,
            "durable_dir": info.get("durable"),
        })
    return out


# --- YAML (JSON scalars are valid YAML; we only need maps, lists and scalars) ----------------------------

def _yaml(value, indent: int = 0) -> list:
    pad = "  " * indent
    lines = []
    if isinstance(value, dict):
        if not value:
            return [pad + "{}"]
        for key, val in value.items():
            if isinstance(val, (dict, list)) and val:
                lines.append(f"{pad}{key}:")
                lines += _yaml(val, indent + 1)
            else:
                lines.append(f"{pad}{key}: {_scalar(val)}")
    elif isinstance(value, list):
        for item in value:
            if isinstance(item, (dict, list)) and item:
                sub = _yaml(item, indent + 1)
                lines.append(f"{pad}- {sub[0].lstrip()}")
                lines += sub[1:]
            else:
                lines.append(f"{pad}- {_scalar(item)}")
    return lines


def _scalar(val) -> str:
    if val is None:
        return "null"
    if isinstance(val, dict):
        return "{}"
    if isinstance(val, list):
        return "[]"
    return json.dumps(val)


def scenario_options(scenario_dir: str) -> dict:
    """The gpu_health options a scenario is built for (expect.yml `options: {k: v}`), ints kept as ints."""
    try:
        with open(os.path.join(scenario_dir, "expect.yml"), encoding="utf-8") as fh:
            line = next((ln for ln in fh if ln.startswith("options:")), "options: {}")
    except OSError:
        return {}
    body = line.split(":", 1)[1].strip().strip("{}")
    options = {}
    for pair in filter(None, (p.strip() for p in body.split(","))):
        key, _sep, value = (x.strip() for x in pair.partition(":"))
        options[key] = int(value) if value.isdigit() else value
    return options


# Preflight variables that a scenario's expect.yml options translate to.
PREFLIGHT_VARS = {"expected_count": "preflight_expected_gpus", "expected_name": "preflight_expected_gpu_name",
                  "min_memory_mib": "preflight_min_memory_mib"}


def without_control_path(common_args: str) -> list:
    """The words of an inventory's ansible_ssh_common_args without the ControlPath that ``inventory`` puts there (a
    baseline that connects cold, or a user's inventory, which rarely names one)."""
    words = common_args.split()
    return [w for pair in zip(words[::2], words[1::2]) if not pair[1].startswith("ControlPath") for w in pair]


def inventory(state: str, instances: list, key_file: str, known_hosts: str, port: int = 22) -> dict:
    common = f"-o UserKnownHostsFile={known_hosts} -o StrictHostKeyChecking=yes -o IdentitiesOnly=yes"
    control = os.path.join(state, "cp", "%C")
    if len(control) + 40 < 100:      # a unix socket path must fit in 108 bytes
        common += f" -o ControlPath={control}"
    hosts = {}
    groups: dict = {}
    for inst in instances:
        hosts[inst["name"]] = {
            "ansible_host": inst["addr"], "ansible_port": port, "ansible_user": inst["user"],
            "lab_platform": inst["platform"], "lab_region": inst["region"], "lab_scenario": inst["scenario"],
            "lab_variant": inst["variants"], "lab_gpu_count": inst["gpus"], "lab_data_dir": inst["data_dir"],
            "lab_durable_dir": inst["durable_dir"], "lab_meter_log": inst["meter_log"],
            "lab_gpu_runtime": inst["gpu_runtime"],
        }
        scenario = inst["scenario"]
        scenario = scenario if os.path.isabs(scenario) else os.path.join(st.LAB_DIR, "gpu", "scenarios", scenario)
        for option, value in scenario_options(scenario).items():
            if option in PREFLIGHT_VARS:
                hosts[inst["name"]][PREFLIGHT_VARS[option]] = value
        names = [inst["platform"]] + [f"lab_variant_{v.replace('-', '_')}" for v in inst["variants"]]
        if inst["durable_dir"]:
            names.append(f"lab_region_{inst['platform']}_{inst['region']}".lower().replace("-", "_"))
        for group in names:
            groups.setdefault(group, {"hosts": {}})["hosts"][inst["name"]] = None
    children = {"lab": {"hosts": hosts}}
    children.update(dict(sorted(groups.items())))
    return {"all": {"vars": {
        "ansible_ssh_private_key_file": key_file,
        "ansible_ssh_common_args": common,
        "lab_state_dir": state,
        # torch cannot see an emulated GPU: the lab's preflight leaves the torch probe out.
        "preflight_check_torch": False,
    }, "children": children}}


def write_inventory(path: str, inv: dict, header: str) -> None:
    lines = [f"# {line}" for line in header.splitlines()] + ["---"] + _yaml(inv)
    text = "\n".join(lines) + "\n"
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(text)
    os.replace(tmp, path)
