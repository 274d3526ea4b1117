"""The acceptance of issue 32: rent through the API, and never pay for a bad box.

The vast.ai fake serves four offers on four machines whose boxes are lab instances started when an offer is rented
(``LabProvisioner``: ``tests/lab/fleet add`` after a provisioning delay, ``fleet remove`` on destroy), with the GPU
emulator's scenarios 8xh100-hwslowdown (the cheapest offer: throttled, preflight FAIL), then 8xh100 (PASS) thrice.

- ``rent.yml -e rent_count=2`` keeps exactly two PASS boxes, gives back the throttled one (one destroy call), records
  its machine id, and preflight and launch over the rented inventory succeed; a second run creates nothing;
- a second rent skips the recorded bad machine's offer (check mode: creates nothing, prints the offer it would take);
- a price cap below every offer creates nothing and names the cap; RunPod refuses a cap (its create takes no price),
  and its --check prints the price as unknown, never 0;
- the seconds the bad box was billed are in the table; the key is in no output, report or bad_machines.json.
"""
from __future__ import annotations

import json
import os
import shlex
import subprocess

import pytest
import yaml

from labhelpers import REPO, fake_api, needs_root, started_fleet
from lab_teardown_support import checkpoint
from test_launch_lab import wait_finished

pytestmark = needs_root
VENV_BIN = os.path.join(REPO, ".venv", "bin")
KEY = "RENTLABKEY-7c1d9e-never-in-any-output"
SCENARIOS = ["8xh100-hwslowdown", "8xh100", "8xh100", "8xh100"]
NAME = "sweep-a"
BAD_MACHINE = "20001"
TRAIN_SH = r"""#!/usr/bin/env bash
echo "epoch 1/1"
cp ckpt/best.safetensors "$TRAINER_OUTPUT_DIR/best.safetensors"
"""


@pytest.fixture(scope="module")
def lab(lab_free, tmp_path_factory):
    state = tmp_path_factory.mktemp("lab")
    with started_fleet(state, "--size", "1", "--platform", "lab-01=vastai") as fleet:
        offers = [fake_api.vastai_offer(i + 1, s) for i, s in enumerate(SCENARIOS)]
        provisioner = fake_api.LabProvisioner(state, delay=0.5, first_index=2)
        fake = fake_api.FakeAPI("vastai", KEY, offers=offers, provisioner=provisioner).start()
        # RunPod chooses the machine: its fake gives each new pod the next scenario of its list
        pods = fake_api.LabProvisioner(state, scenarios=["8xh100-hwslowdown", "8xh100"], delay=0.5, first_index=10)
        runpod = fake_api.FakeAPI("runpod", KEY, provisioner=pods).start()
        try:
            yield fleet, fake, provisioner, tmp_path_factory.mktemp("laptop"), runpod
        finally:
            fake.stop()
            runpod.stop()
        assert provisioner.errors == [] and pods.errors == []


def rent(lab, *extra, check=False, provider="vastai"):
    fleet, fake, _prov, laptop, runpod = lab
    if provider == "runpod":
        fake = runpod
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_NOCOLOR="1", VAST_API_KEY=KEY,
               RUNPOD_API_KEY=KEY,
               PATH="%s:%s" % (VENV_BIN, os.environ.get("PATH", "")))
    settings = {"rent_name": NAME, "rent_provider": provider, "rent_api_url": fake.url, "rent_count": 2,
                "rent_gpu": "H100_SXM", "rent_gpu_count": 8, "rent_max_price": 5, "rent_image": "pytorch/pytorch:latest",
                "rent_disk_gb": 64, "rent_max_tries": 3, "rent_poll_interval": 0.2, "preflight_sample_seconds": 1,
                "rent_inventory_dir": str(laptop / "inventories" / "rented")}
    if provider != "vastai":
        del settings["rent_max_price"]  # vast.ai's offers alone carry a price: RunPod refuses a cap it cannot enforce
    argv = [os.path.join(VENV_BIN, "ansible-playbook"), "-i", fleet.inventory_path,
            os.path.join(REPO, "playbooks", "rent.yml"), "-e", json.dumps(settings)]
    argv += list(extra) + (["--check"] if check else [])
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=str(laptop), timeout=600,
                          stdin=subprocess.DEVNULL, check=False)
    return proc, proc.stdout + proc.stderr


def calls(fake, method, prefix):
    return [r for r in fake.api_requests() if r["method"] == method and r["path"].startswith(prefix)]


def playbook(fleet, laptop, inventory, name, *args):
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               PATH="%s:%s" % (VENV_BIN, os.environ.get("PATH", "")))
    return subprocess.run([os.path.join(VENV_BIN, "ansible-playbook"), "-i", str(inventory),
                           os.path.join(REPO, "playbooks", name), *args], capture_output=True, text=True, env=env,
                          cwd=str(laptop), stdin=subprocess.DEVNULL, timeout=600, check=False)


def test_rent_keeps_two_pass_boxes_and_gives_back_the_throttled_one(lab):
    fleet, fake, _prov, laptop, _runpod = lab  # pylint: disable=invalid-name
    proc, out = rent(lab, "-vvv")
    assert proc.returncode == 0, out[-6000:]
    assert len(calls(fake, "PUT", "/api/v0/asks/")) == 3
    (destroy,) = calls(fake, "DELETE", "/api/v0/instances/")
    assert destroy["path"].rstrip("/").endswith("/9000002")  # the box of the first, cheapest offer
    report = json.loads((laptop / "reports" / ("rent-%s.json" % NAME)).read_text())
    # what autopilot_replace rents a replacement with
    assert report["spec"] == {"gpu": "H100_SXM", "gpu_count": 8, "max_price": 5, "image": "pytorch/pytorch:latest",
                              "disk_gb": 64, "interruptible": False} and report["api_url"] == fake.url, report
    rows = {row["host"]: row for row in report["boxes"]}
    kept = sorted(h for h, r in rows.items() if r["outcome"] == "kept")
    assert kept == ["%s-9000003" % NAME, "%s-9000004" % NAME], rows
    assert all(rows[h]["verdict"] == "PASS" for h in kept)
    bad = rows["%s-9000002" % NAME]
    assert (bad["outcome"], bad["verdict"], bad["machine_id"], bad["offer"]) == (
        "given back", "FAIL", BAD_MACHINE, 7100001)
    assert bad["finding"].startswith("throttle_active") and bad["seconds_billed"] > 0
    recorded = json.loads((laptop / "reports" / "bad_machines.json").read_text())
    assert [(r["machine_id"], r["provider"], r["finding"].split(":")[0]) for r in recorded] == [
        (BAD_MACHINE, "vastai", "throttle_active")]
    assert recorded[0]["cost"] >= 0 and recorded[0]["seconds_billed"] == bad["seconds_billed"]
    # the bad box is probed as soon as it answers and given back at once: between the moment its lab instance
    # answered (the fake's provisioner) and its destroy, the fake served at most one read of its record (the poll
    # that saw it running); the old flow read it again before the destroy, and waited for the other new boxes
    ready = next(at for at, verb, index, _detail in _prov.events if verb == "ready" and index == 2)
    reads = [r for r in fake.api_requests() if r["method"] == "GET" and r["path"].rstrip("/").endswith("/9000002")
             and ready <= r["at"] <= destroy["at"]]
    assert len(reads) <= 1, reads
    print("bad box billed %.1f s (running after %s s, probe %s s; reads of its record after it answered: %d)" % (
        bad["seconds_billed"], bad["running_after_s"], bad["probe_seconds"], len(reads)))
    # the table: the bad box's seconds billed, its offer and outcome
    line = next(ln for ln in out.splitlines() if "%s-9000002" % NAME in ln and "given back" in ln)
    assert "7100001" in line and str(bad["seconds_billed"]) in line, line
    for text in [out] + [p.read_text() for p in (laptop / "reports").glob("*.json")] + \
            [p.read_text() for p in (laptop / "inventories" / "rented").glob("*.yml")]:
        assert KEY not in text

    # the rented inventory is ready for preflight and launch (with the user's SSH settings in group_vars)
    inventory = laptop / "inventories" / "rented" / ("%s.yml" % NAME)
    allvars = fleet.inventory["all"]["vars"]
    (inventory.parent / "group_vars").mkdir(exist_ok=True)
    (inventory.parent / "group_vars" / "all.yml").write_text(json.dumps({
        "ansible_ssh_private_key_file": allvars["ansible_ssh_private_key_file"],
        "ansible_ssh_common_args": allvars["ansible_ssh_common_args"], "preflight_check_torch": False,
        "preflight_sample_seconds": 1}))
    proc = playbook(fleet, laptop, inventory, "preflight.yml")
    assert proc.returncode == 0, proc.stdout[-4000:]
    src = laptop / "src"
    (src / "ckpt").mkdir(parents=True)
    (src / "train.sh").write_text(TRAIN_SH)
    (src / "ckpt" / "best.safetensors").write_bytes(checkpoint("rent"))
    proc = playbook(fleet, laptop, inventory, "launch.yml", "-e", "launch_src=%s" % src,
                    "-e", "launch_command='bash train.sh'", "-e", json.dumps({"launch_min_seconds": 0}))
    assert proc.returncode == 0, proc.stdout[-4000:]
    with open(fleet.inventory_path, encoding="utf-8") as handle:  # fleet add wrote the rented boxes there
        fleet.hosts.update(yaml.safe_load(handle)["all"]["children"]["lab"]["hosts"])
    # one item: launch gives it to one of the two rented boxes
    (host,) = [h for h in ("lab-03", "lab-04") if fleet.ssh(h, "test -d ~/.trainer/jobs/train", check=False).returncode == 0]
    status = wait_finished(fleet, host, "train")
    assert status["exit_code"] == 0, (status, fleet.ssh(host, "tail -20 ~/.trainer/jobs/train/job.log").stdout)

    # a second run creates nothing
    before = len(fake.api_requests())
    proc, out = rent(lab)
    assert proc.returncode == 0, out[-4000:]
    assert [r["method"] for r in fake.api_requests()[before:] if r["method"] != "GET"] == [], out[-3000:]


def test_a_later_rent_skips_the_bad_machine_and_check_mode_creates_nothing(lab):
    _fleet, fake, _prov, laptop, _runpod = lab
    assert (laptop / "reports" / "bad_machines.json").exists(), "the first rent recorded no bad machine"
    before = len(fake.api_requests())
    proc, out = rent(lab, "-e", "rent_name=sweep-b", "-e", "rent_count=1", check=True)
    assert proc.returncode == 0, out[-4000:]
    lines = [ln.strip(" -'\"") for ln in out.splitlines()]
    offered = [ln.split()[0] for ln in lines if "H100_SXM" in ln]
    assert offered == ["7100004"], out[-3000:]  # the free offer; never the bad machine's 7100001
    assert "excluded by bad_machine: 7100001" in lines, out[-3000:]
    assert any(ln.startswith("would rent 1 box(es)") and "expected total 2.4000 $/h" in ln for ln in lines), out[-3000:]
    assert [r["method"] for r in fake.api_requests()[before:]] == ["GET", "POST"]  # list, search: nothing created


def test_a_price_cap_below_every_offer_creates_nothing_and_names_the_cap(lab):
    _fleet, fake, _prov, _laptop, _runpod = lab
    before = len(fake.api_requests())
    proc, out = rent(lab, "-e", "rent_name=sweep-c", "-e", "rent_count=1", "-e", "rent_max_price=0.5")
    assert proc.returncode != 0
    text = " ".join(out.split())
    assert "no_offer" in text or "max_price 0.5 $/h excluded" in text, out[-3000:]
    assert "max_price 0.5 $/h excluded" in text, out[-3000:]
    assert [r["method"] for r in fake.api_requests()[before:]] == ["GET", "POST"]
    assert KEY not in out


def test_runpod_rent_gives_back_the_pod_on_a_throttled_machine_and_records_its_machine_id(lab):
    """RunPod: POST /v1/pods; the first pod lands on a throttled machine (the fake's first scenario): it is given
    back (DELETE, after the box's RUNPOD_POD_ID matched) and its machineId recorded; the next pod is kept."""
    _fleet, _fake, _prov, laptop, runpod = lab
    proc, out = rent(lab, "-e", "rent_name=pods-a", "-e", "rent_count=1", "-e", "rent_gpu='NVIDIA H100 80GB HBM3'",
                     "-e", "rent_bad_machines_path=%s" % (laptop / "reports" / "bad_pods.json"), provider="runpod")
    assert proc.returncode == 0, out[-5000:]
    posts = [r for r in runpod.api_requests() if r["method"] == "POST" and r["path"] == "/v1/pods"]
    assert len(posts) == 2 and posts[0]["body"]["ports"] == ["22/tcp"] and posts[0]["body"]["name"] == "pods-a"
    assert [r["path"] for r in runpod.api_requests() if r["method"] == "DELETE"] == ["/v1/pods/fakepod0010"]
    recorded = json.loads((laptop / "reports" / "bad_pods.json").read_text())
    assert [(r["machine_id"], r["finding"].split(":")[0]) for r in recorded] == [("fakemach0010", "throttle_active")]
    assert KEY not in out


def test_runpod_refuses_a_price_cap_and_check_mode_prints_the_unknown_price_as_unknown(lab):
    """RunPod's create takes no price (PodCreateInput): rent_max_price is refused before any request, never ignored;
    without it, --check says the expected total is unknown (the pod's rate is known once it runs), never 0."""
    _fleet, _fake, _prov, _laptop, runpod = lab
    before = len(runpod.api_requests())
    pod = ("-e", "rent_name=pods-b", "-e", "rent_count=1", "-e", "rent_gpu='NVIDIA H100 80GB HBM3'")
    proc, out = rent(lab, *pod, "-e", "rent_max_price=2", provider="runpod", check=True)
    text = " ".join(out.split())
    assert proc.returncode != 0, out[-3000:]
    assert "runpod: spec.max_price (rent_max_price) 2.0 $/h cannot be enforced" in text, out[-3000:]
    assert "Drop max_price (rent_max_price), or rent on vast.ai" in text
    assert runpod.api_requests()[before:] == []
    proc, out = rent(lab, *pod, provider="runpod", check=True)
    assert proc.returncode == 0, out[-3000:]
    lines = [ln.strip() for ln in out.splitlines()]
    assert any(ln.startswith("would rent 1 box(es)") and "expected total unknown: 1 box(es) of unknown price" in ln
               for ln in lines), out[-3000:]
    assert "0.0000 $/h" not in out
    assert [r["method"] for r in runpod.api_requests()[before:]] == ["GET"]  # the pods labelled pods-b: none created
    assert KEY not in out


def readme_rent_commands():
    """The commands of README.md's "Rent" section, as a shell reads them (continuation lines joined, comments and the
    export left out): [argv, ...]."""
    text = open(os.path.join(REPO, "README.md"), encoding="utf-8").read()
    section = text.split("\n## Rent\n", 1)[1].split("\n## ", 1)[0]
    block = section.split("```bash\n", 1)[1].split("```", 1)[0].replace("\\\n", " ")
    return [shlex.split(line, comments=True) for line in block.splitlines()
            if line.strip().startswith("ansible-playbook")]


def image_boxes(fleet):
    """The rented boxes of the fleet (fleet add wrote them into its inventory): lab-21 and up."""
    with open(fleet.inventory_path, encoding="utf-8") as handle:
        fleet.hosts.update(yaml.safe_load(handle)["all"]["children"]["lab"]["hosts"])
    return sorted(host for host in fleet.hosts if int(host.split("-")[1]) >= 20)


def test_the_readmes_rent_commands_run_as_written_against_the_fake(lab, tmp_path):
    """README.md's three Rent commands, verbatim, with only what a lab needs added: the fake's URL (rent_api_url),
    the lab's SSH key and known_hosts, and preflight's lab settings. The fake serves offers that fit the README's
    spec (1 x H100_SXM at most 2.5 $/h): the cheapest one throttled, one above the cap; the commands check, rent two
    (giving back the throttled box), and launch the two configs there. Then, as the user goes on, teardown of one box
    (approved by name) pulls its results and terminates its instance once, which leaves the rented inventory, and a
    patrol over that inventory judges the box left."""
    fleet, _fake, _prov, _laptop, _runpod = lab
    commands = readme_rent_commands()
    assert [argv[:4] for argv in commands] == [
        ["ansible-playbook", "-i", "~/my_fleet.yml", "remote_gpu.trainer.rent"]] * 2 + [
        ["ansible-playbook", "-i", "inventories/rented/sweep-a.yml", "remote_gpu.trainer.launch"]], commands
    # the user's fleet file, which the rent only parses (the quick start's shape; no host of it is contacted)
    my_fleet = tmp_path / "my_fleet.yml"
    my_fleet.write_text("autodl:\n  hosts:\n    autodl-4090: {ansible_host: 127.0.0.1, ansible_port: 9}\n")
    offers = [fake_api.vastai_offer(1, "h100-load-hwslowdown-edited", price=2.1),
              fake_api.vastai_offer(2, "h100-idle", price=2.2), fake_api.vastai_offer(3, "h100-idle", price=2.3),
              fake_api.vastai_offer(4, "h100-idle", price=2.6)]
    provisioner = fake_api.LabProvisioner(fleet.state, delay=0.5, first_index=20)
    fake = fake_api.FakeAPI("vastai", KEY, offers=offers, provisioner=provisioner).start()
    allvars = fleet.inventory["all"]["vars"]
    # the lab's SSH key, and none of its SSH options: the new boxes' host keys are unknown, as a real rent's are
    lab_needs = ["-e", json.dumps({"rent_api_url": fake.url, "preflight_sample_seconds": 1,
                                   "preflight_check_torch": False,
                                   "ansible_ssh_private_key_file": allvars["ansible_ssh_private_key_file"]})]
    (tmp_path / "configs").mkdir()
    for name in ("a", "b"):
        (tmp_path / "configs" / ("%s.yaml" % name)).write_text("lr: 0.1\n")
    # the training: a real checkpoint (teardown checks that every one it pulls loads)
    (tmp_path / "ckpt.safetensors").write_bytes(checkpoint("readme"))
    (tmp_path / "train.py").write_text("import os, shutil, sys\nprint('epoch 1/1', sys.argv[1:])\n"
                                       "shutil.copy('ckpt.safetensors', os.path.join(os.environ['TRAINER_OUTPUT_DIR'], "
                                       "'best.safetensors'))\n")
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_NOCOLOR="1", VAST_API_KEY=KEY,
               PATH="%s:%s" % (VENV_BIN, os.environ.get("PATH", "")))
    try:
        outs = []
        for number, argv in enumerate(commands):
            if number == 2:
                # the lab's boxes stand in for the README's image (pytorch/pytorch), which has a `python`
                for host in image_boxes(fleet):
                    fleet.ssh(host, "command -v python >/dev/null || ln -s \"$(command -v python3)\" "
                                    "/usr/local/bin/python")
            words = [str(my_fleet) if arg == "~/my_fleet.yml" else arg.replace("$PWD", str(tmp_path))
                     for arg in argv[1:]]
            argv = [os.path.join(VENV_BIN, "ansible-playbook")] + words + lab_needs
            proc = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=str(tmp_path), timeout=600,
                                  stdin=subprocess.DEVNULL, check=False)
            outs.append(proc.stdout + proc.stderr)
            assert proc.returncode == 0, (argv, outs[-1][-5000:])
        # then, as the user goes on: the results of one box pulled and its instance terminated (teardown, approved by
        # name), and a patrol over the rented inventory, which no longer lists that box
        done = {}
        for host in ("lab-21", "lab-22"):
            status = wait_finished(fleet, host, "train")
            assert status["exit_code"] == 0, (host, status, fleet.ssh(host, "tail -20 ~/.trainer/jobs/train/job.log",
                                                                      check=False).stdout)
            done[host] = fleet.ssh(host, "cat ~/.trainer/jobs/train/items/*/status.json", check=False).stdout
        assert all('"exit_code": 0' in text for text in done.values()), done
        rented_file = tmp_path / "inventories" / "rented" / "sweep-a.yml"
        boxes = yaml.safe_load(rented_file.read_text())["all"]["children"]["vastai"]["hosts"]
        gone, kept = sorted(boxes)
        before = len(fake.api_requests())
        for argv in (["-i", "inventories/rented/sweep-a.yml", "remote_gpu.trainer.teardown", "-l", gone,
                      "-e", "teardown_approve=%s" % gone],
                     ["-i", "inventories/rented/sweep-a.yml", "remote_gpu.trainer.patrol"]):
            proc = subprocess.run([os.path.join(VENV_BIN, "ansible-playbook")] + argv + lab_needs, capture_output=True,
                                  text=True, env=env, cwd=str(tmp_path), timeout=600, stdin=subprocess.DEVNULL,
                                  check=False)
            outs.append(proc.stdout + proc.stderr)
            assert proc.returncode == 0, (argv, outs[-1][-5000:])
    finally:
        fake.stop()
    assert provisioner.errors == []
    # --check: the two cheapest offers under the cap, the one above it named; nothing created
    assert "excluded by max_price: 7100004" in outs[0] and "would rent 2 box(es)" in outs[0], outs[0][-3000:]
    creates = [r for r in fake.api_requests() if r["method"] == "PUT"]
    assert len(creates) == 3  # the throttled box, given back, and two kept
    deletes = [r["path"].rstrip("/") for r in fake.api_requests() if r["method"] == "DELETE"]
    # the throttled box given back by the rent, then the one box teardown was approved for, once
    assert [path.rsplit("/", 1)[1] for path in deletes] == ["9000020", str(boxes[gone]["vastai_instance_id"])], deletes
    assert [r["method"] for r in fake.api_requests()[before:] if r["method"] != "GET"] == ["DELETE"]
    assert (tmp_path / "pulls" / gone / "train" / "PULL_VERIFIED.json").exists()
    # the rented inventory no longer lists the terminated box (its first line is rent's still), and patrol, run over
    # it above, judged the one left
    left = rented_file.read_text()
    assert left.startswith("# The boxes kept by remote_gpu.trainer.rent for rent sweep-a (vastai)"), left[:200]
    assert {group: sorted(value["hosts"]) for group, value in yaml.safe_load(left)["all"]["children"].items()} == {
        "vastai": [kept], "rent_sweep_a": [kept]}
    assert gone not in outs[-1].split("PLAY RECAP")[-1] and kept in outs[-1].split("PLAY RECAP")[-1], outs[-1][-3000:]
    assert all(KEY not in out for out in outs)
    # each kept box's host key was taken on its first contact into the rent's known_hosts, and the rented
    # inventory's hosts check it there (the launch above ran with nothing else)
    known = (tmp_path / "inventories" / "rented" / "sweep-a.known_hosts").read_text().splitlines()
    assert len(boxes) == 2, boxes
    for host in boxes.values():
        name = host["ansible_host"] if int(host["ansible_port"]) == 22 else "[%s]:%s" % (
            host["ansible_host"], host["ansible_port"])
        assert any(line.split()[0] == name for line in known), (name, known)
        assert host["ansible_ssh_common_args"].endswith("-o UserKnownHostsFile=%s -o StrictHostKeyChecking=yes" % (
            tmp_path / "inventories" / "rented" / "sweep-a.known_hosts")), host


def test_lambda_rent_gives_back_the_throttled_instance_and_keeps_the_next(lab):
    """Lambda: POST /api/v1/instance-operations/launch, one instance per request, with the rent's filesystem; the
    first instance lands on a throttled machine (the fake's first scenario). Lambda's boxes have no id of their own,
    so it is given back (terminate) after the provider's record matched the probed address; the next is kept, probed
    where its filesystem is mounted (the rent's file_system_names)."""
    fleet, _fake, _prov, laptop, _runpod = lab
    provisioner = fake_api.LabProvisioner(fleet.state, scenarios=["8xh100-hwslowdown", "8xh100"], delay=0.5,
                                          first_index=30)
    fake = fake_api.FakeAPI("lambda", KEY, provisioner=provisioner).start()
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               LAMBDA_API_KEY=KEY, PATH="%s:%s" % (VENV_BIN, os.environ.get("PATH", "")))
    try:
        proc = subprocess.run([os.path.join(VENV_BIN, "ansible-playbook"), "-i", fleet.inventory_path,
                               os.path.join(REPO, "playbooks", "rent.yml"), "-e", json.dumps({
                                   "rent_name": "lam-a", "rent_provider": "lambda", "rent_api_url": fake.url,
                                   "rent_count": 1, "rent_gpu_count": 8, "rent_regions": ["us-east-1"],
                                   "rent_spec": {"instance_type": "gpu_8x_h100_sxm5", "ssh_key_names": ["lab"],
                                                 "file_system_names": ["lab"]},
                                   "rent_poll_interval": 0.2, "preflight_sample_seconds": 1,
                                   "preflight_check_torch": False,
                                   "rent_inventory_dir": str(laptop / "inventories" / "rented")})],
                              capture_output=True, text=True, env=env, cwd=str(laptop), timeout=600,
                              stdin=subprocess.DEVNULL, check=False)
    finally:
        fake.stop()
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-5000:]
    assert provisioner.errors == []
    launches = [r for r in fake.api_requests() if r["path"].endswith("/instance-operations/launch")]
    assert len(launches) == 2 and launches[0]["body"]["file_system_names"] == ["lab"], launches
    terminates = [r["body"] for r in fake.api_requests() if r["path"].endswith("/instance-operations/terminate")]
    report = json.loads((laptop / "reports" / "rent-lam-a.json").read_text())
    rows = {row["outcome"]: row for row in report["boxes"]}
    assert terminates == [{"instance_ids": [rows["given back"]["id"]]}], terminates
    assert rows["given back"]["finding"].startswith("throttle_active"), rows
    assert rows["kept"]["verdict"] == "PASS" and rows["kept"]["id"] != rows["given back"]["id"], rows
    assert KEY not in out


def test_a_key_the_boxes_refuse_gives_back_one_box_unprobed_and_stops_the_rent(lab, tmp_path):
    """The laptop's key is not the one the provider installs (a user's ssh settings, not the machine): the first new
    box is given back UNPROBED after its identity check, its machine is not recorded as bad, and the rent stops
    instead of renting box after box that would each fail the same way."""
    _fleet, fake, _prov, laptop, _runpod = lab
    key = tmp_path / "not_the_providers_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    bad = laptop / "reports" / "bad_machines.json"
    recorded = bad.read_text() if bad.exists() else None
    before = len(fake.api_requests())
    proc, out = rent(lab, "-e", "rent_name=sweep-k", "-e", "rent_count=1", "-e", "rent_max_tries=3",
                     "-e", "ansible_ssh_private_key_file=%s" % key)
    text = " ".join(out.split())
    assert proc.returncode != 0, out[-4000:]
    assert "ssh_auth_failed" in text and "Permission denied (publickey" in text, out[-4000:]
    assert "UNPROBED" in text and "not recorded as bad" in text, out[-4000:]
    assert "Warning: Permanently added" not in text
    created = [r for r in fake.api_requests()[before:] if r["method"] == "PUT" and r["path"].startswith("/api/v0/asks/")]
    deleted = [r for r in fake.api_requests()[before:] if r["method"] == "DELETE"]
    # one box only: rented and given back, none rented after the stop (rent_max_tries would allow three)
    assert len(created) == 1 and len(deleted) == 1, [(r["method"], r["path"]) for r in fake.api_requests()[before:]]
    assert (bad.read_text() if bad.exists() else None) == recorded  # no machine blamed for the laptop's key
    assert KEY not in out
