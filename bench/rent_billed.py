#!/usr/bin/env python
"""Benchmark: the seconds a bad box is billed by playbooks/rent.yml, from its create call's answer to its destroy's
acceptance, against the acceptance bound of issue 32: at most the preflight probe's time plus one API poll interval
above the provider's provisioning delay.

The vast.ai fake (tests/lab/providers/fake_api.py) serves two offers: the cheaper one's box is throttled (the GPU
emulator's 8xh100-hwslowdown capture: preflight FAIL), the other is fit. ``rent.yml -e rent_count=1`` rents the
throttled one; remote_gpu.trainer.rent_probe waits for it, probes it as soon as it answers SSH, gives it back at once,
and the next round rents the other. Per run, measured in that run:

- provisioning: from the create call's answer (``created_at``) until the fake's box answered and its record said
  running (the fake's provisioner ``ready`` event): the configured ``--delay`` plus the lab's ``fleet add``;
- probe: the probe's one SSH execution, as the controller timed it (``probe_seconds``; the box's own
  ``seconds.total`` is shown too);
- floor = provisioning + probe; bound = floor + poll interval; billed = ``destroy_at - created_at``;
- the excess (billed - floor) split into: the poll that saw it running (``running_at - ready``), the SSH knock
  (``answered_at - running_at``), the probe's start (``probe_started_at - answered_at``), the identity check until
  the DELETE reached the fake (its log), and the provider's answer to the DELETE (the fake stops the lab instance,
  ``fleet remove``, before it answers: the provider's time, not the rent's; the billed clock still counts it).

Prints each run and the median excess against the poll interval (met when excess <= poll). Needs root (the lab
fleet). LAB_NET=127.0.N moves the fleet off the default addresses.
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


def one_run(args, fake_mod):
    """The bad box's row of the rent's report, and when the fake's box of it was ready."""
    with lab_fleet(1, "--platform", "lab-01=vastai") as (inventory, state, env), tempfile.TemporaryDirectory() as tmp:
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
        ready = next(at for at, verb, index, _detail in provisioner.events if verb == "ready" and index == 2)
        (sent,) = [r["at"] for r in fake.api_requests() if r["method"] == "DELETE"
                   and r["path"].rstrip("/").endswith("/%s" % bad[0]["id"])]
        return bad[0], ready, sent


def main():
    args = arguments(__doc__, repeat=3, delay=(3.0, "the fake's provisioning delay, seconds"),
                     sample=(1, "preflight_sample_seconds"), poll=(0.5, "rent_poll_interval"))
    fake_mod = fake_api()
    excesses, ratios = [], []
    for run_no in range(args.repeat):
        bad, ready, sent = one_run(args, fake_mod)
        billed = bad["destroy_at"] - bad["created_at"]
        provisioning = ready - bad["created_at"]
        floor = provisioning + bad["probe_seconds"]
        excess = billed - floor
        answer = bad["destroy_at"] - sent  # the fake's DELETE: it stops the lab instance (fleet remove) first
        excesses.append(excess - answer)
        ratios.append(billed / floor)
        print("run %d: billed %.2f s; floor %.2f s = provisioning %.2f s (delay %.1f s + fleet add) + probe %.2f s "
              "(box's own %.2f s); bound (floor + poll %.2f s) %.2f s; excess %.2f s = poll lag %.2f + SSH knock %.2f "
              "+ probe start %.2f + identity check %.2f + the provider's answer to DELETE %.2f; ratio billed/floor %.2f; "
              "the rent's own excess (without the provider's answer) %.2f s: %s" % (
                  run_no + 1, billed, floor, provisioning, args.delay, bad["probe_seconds"],
                  bad["probe_seconds_box"] or 0, args.poll, floor + args.poll, excess, bad["running_at"] - ready,
                  bad["answered_at"] - bad["running_at"], bad["probe_started_at"] - bad["answered_at"],
                  sent - bad["probed_at"], answer, billed / floor, excess - answer,
                  "within one poll" if excess - answer <= args.poll else "ABOVE one poll"))
    median = statistics.median(excesses)
    verdict = "met" if median <= args.poll else "NOT met"
    ratio = statistics.median(ratios)
    print("median excess above provisioning + probe (the provider's answer to DELETE left out): %.2f s against one "
          "poll interval %.2f s (%s); median ratio billed/floor %.2f" % (median, args.poll, verdict, ratio))
    return 0


if __name__ == "__main__":
    sys.exit(main())
