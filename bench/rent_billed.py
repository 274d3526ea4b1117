#!/usr/bin/env python
"""Benchmark: the seconds a bad box is billed by playbooks/rent.yml (from its create call to its destroy), as a ratio
to what cannot be avoided: the provider's provisioning delay plus the probe's own time (target <= 1.5).

The vast.ai fake (tests/lab/providers/fake_api.py) serves two offers: the cheaper one's box is throttled (the GPU
emulator's 8xh100-hwslowdown capture: preflight FAIL), the other is fit. ``rent.yml -e rent_count=1`` rents the
throttled one, probes it, gives it back and rents the other; the rent's report says how long the bad box was billed
(``seconds_billed``), when it ran (``running_after_s``) and how long its probe took (``probe_seconds``). The rest of
the bill is the rent's own overhead: polling, the SSH wait, Ansible's tasks, the identity check and the destroy.
Prints each run's figures and the median ratio. Needs root (the lab fleet). LAB_NET=127.0.N moves the fleet off the
default addresses.
"""

from __future__ import annotations

import importlib.util
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

from lab_common import REPO, VENV_BIN, arguments, lab_fleet  # noqa: E402

KEY = "BENCHRENTKEY-never-shown"


def fake_api():
    spec = importlib.util.spec_from_file_location("fake_api", REPO / "tests" / "lab" / "providers" / "fake_api.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main():
    args = arguments(__doc__, repeat=3, delay=(3.0, "the fake's provisioning delay, seconds"),
                     sample=(1, "preflight_sample_seconds"), poll=(0.5, "rent_poll_interval"))
    fake_mod = fake_api()
    ratios = []
    for run_no in range(args.repeat):
        with lab_fleet(1, "--platform", "lab-01=vastai") as (inventory, state, env), \
                tempfile.TemporaryDirectory() as tmp:
            offers = [fake_mod.vastai_offer(1, "8xh100-hwslowdown"), fake_mod.vastai_offer(2, "8xh100")]
            provisioner = fake_mod.LabProvisioner(state, delay=args.delay, first_index=2)
            os.environ["LAB_STATE_DIR"] = str(state)
            fake = fake_mod.FakeAPI("vastai", KEY, offers=offers, provisioner=provisioner).start()
            try:
                extra = {"rent_name": "bench", "rent_provider": "vastai", "rent_api_url": fake.url, "rent_count": 1,
                         "rent_gpu": "H100_SXM", "rent_gpu_count": 8, "rent_image": "pytorch/pytorch:latest",
                         "rent_poll_interval": args.poll, "preflight_sample_seconds": args.sample,
                         "rent_inventory_dir": str(pathlib.Path(tmp) / "rented")}
                run_env = dict(env, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), VAST_API_KEY=KEY,
                               PATH="%s:%s" % (VENV_BIN, os.environ.get("PATH", "")))
                proc = subprocess.run([str(VENV_BIN / "ansible-playbook"), "-i", str(inventory),
                                       str(REPO / "playbooks" / "rent.yml"), "-e", json.dumps(extra)],
                                      env=run_env, cwd=tmp, capture_output=True, text=True, check=False)
                if proc.returncode != 0:
                    raise SystemExit("rent.yml failed:\n%s" % (proc.stdout + proc.stderr)[-4000:])
                report = json.loads((pathlib.Path(tmp) / "reports" / "rent-bench.json").read_text())
            finally:
                fake.stop()
            bad = [row for row in report["boxes"] if row["outcome"] == "given back"]
            if len(bad) != 1 or bad[0]["machine_id"] != str(offers[0]["machine_id"]):
                raise SystemExit("expected exactly the throttled box given back, got %s" % report["boxes"])
            bad = bad[0]
            floor = args.delay + float(bad["probe_seconds"] or 0)
            ratio = bad["seconds_billed"] / floor
            ratios.append(ratio)
            print("run %d: billed %.1f s (running after %.1f s, provisioning delay %.1f s, probe %.1f s); floor "
                  "%.1f s; ratio %.2f; overhead %.1f s" % (
                      run_no + 1, bad["seconds_billed"], bad["running_after_s"], args.delay,
                      bad["probe_seconds"] or 0, floor, ratio, bad["seconds_billed"] - floor))
    median = statistics.median(ratios)
    print("median ratio billed / (provisioning delay + probe): %.2f (target <= 1.5)" % median)
    return 0


if __name__ == "__main__":
    sys.exit(main())
