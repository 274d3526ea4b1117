# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Rent instances through a provider's API (for the module remote_gpu.trainer.instance, ``state=present``): pure.

- the spec (``check_spec``): what the user asks for, checked with a clear message;
- vast.ai's offer search (``vast_query``: the body of ``POST /api/v0/bundles/``), and the offers kept or excluded,
  constraint by constraint (``filter_offers``, ``explain``), so a rent that finds nothing says which constraint
  excluded which offers;
- the create request of each provider (``vast_ask_body``: ``PUT /api/v0/asks/{offer_id}/``; ``runpod_create_body``:
  ``POST /v1/pods``; ``lambda_launch_body``: ``POST /api/v1/instance-operations/launch``);
- the instances that already carry the rent's label (``labelled``: a rent is idempotent by its name);
- the verdict on a new box (``judge``), whose SSH failure is told apart (``ssh_fault``): the controller's own login
  refused (``ssh_auth_failed``) or its host-key settings (``ssh_host_key_failed``) are no fault of the machine, and
  stop the rent (``stop_renting``), since every next box would fail the same way.

Field names are the providers' own, from the vendored OpenAPI documents in ``tests/fixtures/openapi`` (their README
names each source and commit): vast.ai ``search offers`` (``POST /api/v0/bundles``: filters ``gpu_name``, ``num_gpus``,
``gpu_ram`` in MB, ``dph_total``, ``reliability``, ``direct_port_count``, ``rentable``, ``machine_id`` as ``{op:
value}`` objects; the answer ``offers``) and ``create instance`` (``PUT /api/v0/asks/{id}``: ``image``, ``label``,
``disk``, ``runtype``, ``onstart``, ``env``, ``price``; the answer ``new_contract``); RunPod ``PodCreateInput``
(``name``, ``imageName``, ``gpuTypeIds``, ``gpuCount``, ``containerDiskInGb``, ``volumeInGb``, ``ports``,
``interruptible``, ``cloudType``, ``dataCenterIds``, ``supportPublicIp``, ``env``); Lambda ``launchInstance_request``
(``region_name``, ``instance_type_name``, ``ssh_key_names`` (exactly one), ``file_system_names`` (at most one),
``quantity`` (1), ``name`` (at most 64 characters); the answer ``data.instance_ids``).
"""

from __future__ import annotations

import re

# vast.ai: the offers' fields this module reads, and the constraint each one answers
SPEC_KEYS = ("gpu", "gpu_count", "min_vram_gb", "max_price", "min_reliability", "min_direct_ports", "image",
             "disk_gb", "volume_gb", "regions", "interruptible", "cloud_type", "public_key", "onstart",
             "instance_type", "ssh_key_names", "file_system_names", "env")

RUNPOD_CLOUD_TYPES = ("SECURE", "COMMUNITY")
LAMBDA_NAME_MAX = 64

# max_price: only vast.ai's offers carry a price to filter on before the create. Neither of the other creates takes
# one: RunPod's PodCreateInput (runpod/docs api-reference/openapi.json, POST /v1/pods; tests/fixtures/openapi/
# runpod-v1.json) has no price or bid field (a pod bills its GPU type's rate in its cloud type, the spot rate when
# interruptible; the bid, bidPerGpu, and runpodctl's deployCost ceiling belong to RunPod's GraphQL API, which this
# collection does not use), and Lambda's launchInstance_request (tests/fixtures/openapi/lambda.json) has none either
# (an instance bills its instance type's price_cents_per_hour). A cap that cannot be enforced is refused, not ignored.
PRICE_CAP_REFUSED = {
    "runpod": "RunPod's create (POST /v1/pods, PodCreateInput) takes no price and no bid: a pod bills its GPU "
              "type's rate in its cloud type (the spot rate with interruptible), known only once it runs. Drop "
              "max_price (rent_max_price), or rent on vast.ai, whose offers are filtered by it",
    "lambda": "Lambda's launch (POST /api/v1/instance-operations/launch) takes no price: an instance bills its "
              "instance type's fixed price (price_cents_per_hour). Drop max_price (rent_max_price), or choose a "
              "cheaper spec.instance_type",
}


class SpecError(ValueError):
    """A spec that cannot be rented as written; the message says what is wrong and what to do."""


def _list(value):
    if value in (None, ""):
        return []
    if isinstance(value, (list, tuple)):
        return [str(v).strip() for v in value if str(v).strip()]
    return [part.strip() for part in str(value).split(",") if part.strip()]


def _number(spec, key, kind=float, minimum=None):
    value = spec.get(key)
    if value in (None, ""):
        return None
    try:
        number = kind(value)
    except (TypeError, ValueError):
        raise SpecError("spec.%s must be a number, not %r." % (key, value)) from None
    if minimum is not None and number < minimum:
        raise SpecError("spec.%s must be at least %s, not %s." % (key, minimum, number))
    return number


def check_spec(provider, spec):
    """The spec, normalised (lists as lists, numbers as numbers, unknown keys refused), or SpecError."""
    spec = dict(spec or {})
    unknown = sorted(set(spec) - set(SPEC_KEYS))
    if unknown:
        raise SpecError("spec has unknown key(s) %s; the keys are %s." % (", ".join(unknown), ", ".join(SPEC_KEYS)))
    out = dict(spec)
    out["gpu"] = _list(spec.get("gpu"))
    out["regions"] = _list(spec.get("regions"))
    out["ssh_key_names"] = _list(spec.get("ssh_key_names"))
    out["file_system_names"] = _list(spec.get("file_system_names"))
    out["gpu_count"] = _number(spec, "gpu_count", int, 1) or 1
    for key in ("min_vram_gb", "max_price", "min_reliability", "disk_gb", "volume_gb"):
        out[key] = _number(spec, key, float, 0)
    out["min_direct_ports"] = _number(spec, "min_direct_ports", int, 0)
    out["interruptible"] = bool(spec.get("interruptible"))
    if out["min_reliability"] is not None and out["min_reliability"] > 1:
        raise SpecError("spec.min_reliability is a fraction between 0 and 1 (vast.ai's reliability), not %s."
                        % out["min_reliability"])
    env = spec.get("env") or {}
    if not isinstance(env, dict):
        raise SpecError("spec.env must be a mapping of variable names to values.")
    out["env"] = {str(k): str(v) for k, v in env.items()}
    if out["max_price"] is not None and provider in PRICE_CAP_REFUSED:
        raise SpecError("%s: spec.max_price (rent_max_price) %s $/h cannot be enforced. %s." % (
            provider, out["max_price"], PRICE_CAP_REFUSED[provider]))
    if provider == "vastai":
        if not spec.get("image"):
            raise SpecError("vastai: spec.image is required (the Docker image of the instance, e.g. "
                            "pytorch/pytorch:latest).")
        if out["min_direct_ports"] is None:
            out["min_direct_ports"] = 1  # the collection needs direct SSH (rsync): the proxy carries no rsync
    elif provider == "runpod":
        if not spec.get("image"):
            raise SpecError("runpod: spec.image is required (imageName, e.g. runpod/pytorch:2.4.0-py3.11-cuda12.4.1-"
                            "devel-ubuntu22.04).")
        if not out["gpu"]:
            raise SpecError("runpod: spec.gpu is required: RunPod GPU type ids (gpuTypeIds), e.g. "
                            "'NVIDIA H100 80GB HBM3', in the order to try them.")
        cloud = str(spec.get("cloud_type") or "SECURE").upper()
        if cloud not in RUNPOD_CLOUD_TYPES:
            raise SpecError("runpod: spec.cloud_type must be SECURE or COMMUNITY, not %r." % spec.get("cloud_type"))
        out["cloud_type"] = cloud
    elif provider == "lambda":
        if not spec.get("instance_type"):
            raise SpecError("lambda: spec.instance_type is required (instance_type_name, e.g. gpu_1x_h100_pcie).")
        if len(out["regions"]) != 1:
            raise SpecError("lambda: spec.regions must name exactly one region (region_name, e.g. us-east-1); "
                            "Lambda launches in one region per request.")
        if len(out["ssh_key_names"]) != 1:
            raise SpecError("lambda: spec.ssh_key_names must name exactly one SSH key registered with Lambda "
                            "(Lambda's launch takes exactly one).")
        if len(out["file_system_names"]) > 1:
            raise SpecError("lambda: spec.file_system_names takes at most one filesystem (Lambda's launch attaches "
                            "at most one).")
    else:
        raise SpecError("%s: renting through the API is not supported (runpod, vastai, lambda are)." % provider)
    return out


# --- vast.ai offers ---------------------------------------------------------------------------------------------

def vast_gpu_name(name):
    """vast.ai's spelling of a GPU name in a search (``RTX 4090`` -> ``RTX_4090``, as vast's CLI writes it)."""
    return "_".join(str(name).split())


def vast_query(spec, limit=64):
    """The body of ``POST /api/v0/bundles/``: the constraints vast.ai filters on itself (GPU name and count,
    rentable, on-demand or bid). Price, VRAM, reliability, direct ports and bad machines are filtered here too
    (``filter_offers``), so that a rent that finds nothing can say which constraint excluded which offer."""
    query = {"limit": int(limit), "type": "bid" if spec.get("interruptible") else "ondemand",
             "rentable": {"eq": True}, "rented": {"eq": False},
             "num_gpus": {"eq": int(spec.get("gpu_count") or 1)}}
    names = [vast_gpu_name(g) for g in spec.get("gpu") or []]
    if len(names) == 1:
        query["gpu_name"] = {"eq": names[0]}
    elif names:
        query["gpu_name"] = {"in": names}
    return query


def _norm_gpu(name):
    return vast_gpu_name(name).lower()


def offer_price(offer):
    for key in ("dph_total", "discounted_dph_total"):
        value = offer.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    return None


def _region_ok(offer, regions):
    geo = str(offer.get("geolocation") or "")
    code = geo.rsplit(",", 1)[-1].strip().upper() if geo else ""
    return any(r.upper() == code or r.lower() in geo.lower() for r in regions)


# (constraint, the spec key that sets it, test) in the order they are applied: an offer is excluded by the first
# constraint it fails, and ``explain`` names that one
def _constraints(spec, bad_machines):
    bad = set(str(m) for m in bad_machines or ())
    gpus = [_norm_gpu(g) for g in spec.get("gpu") or []]
    checks = [
        ("bad_machine", "bad_machines.json",
         lambda o: str(o.get("machine_id")) not in bad),
        ("gpu", "gpu", lambda o: not gpus or _norm_gpu(o.get("gpu_name") or "") in gpus),
        ("gpu_count", "gpu_count", lambda o: int(o.get("num_gpus") or 0) == int(spec.get("gpu_count") or 1)),
        ("rentable", None, lambda o: o.get("rentable", True) is not False),
    ]
    if spec.get("min_vram_gb") is not None:
        checks.append(("min_vram_gb", "min_vram_gb",
                       lambda o: float(o.get("gpu_ram") or 0) >= float(spec["min_vram_gb"]) * 1000))
    if spec.get("min_reliability") is not None:
        checks.append(("min_reliability", "min_reliability",
                       lambda o: float(o.get("reliability2", o.get("reliability")) or 0) >= spec["min_reliability"]))
    if spec.get("min_direct_ports"):
        checks.append(("min_direct_ports", "min_direct_ports",
                       lambda o: int(o.get("direct_port_count") or 0) >= int(spec["min_direct_ports"])))
    if spec.get("regions"):
        checks.append(("regions", "regions", lambda o: _region_ok(o, spec["regions"])))
    if spec.get("max_price") is not None:
        checks.append(("max_price", "max_price",
                       lambda o: offer_price(o) is not None and offer_price(o) <= float(spec["max_price"])))
    return checks


def filter_offers(offers, spec, bad_machines=()):
    """(kept, excluded) of vast.ai offers for ``spec``: ``kept`` cheapest first (then by id), ``excluded`` a dict
    constraint -> [{id, machine_id, gpu_name, price}] of the offers that constraint excluded first."""
    kept, excluded = [], {}
    for offer in offers or []:
        if not isinstance(offer, dict) or offer.get("id") in (None, ""):
            continue
        for name, _key, test in _constraints(spec, bad_machines):
            try:
                ok = test(offer)
            except (TypeError, ValueError):
                ok = False
            if not ok:
                excluded.setdefault(name, []).append(offer_summary(offer))
                break
        else:
            kept.append(offer)
    kept.sort(key=lambda o: (offer_price(o) if offer_price(o) is not None else float("inf"), str(o.get("id"))))
    return kept, excluded


def offer_summary(offer):
    return {"id": offer.get("id"), "machine_id": offer.get("machine_id"), "gpu_name": offer.get("gpu_name"),
            "num_gpus": offer.get("num_gpus"), "price_per_hour": offer_price(offer),
            "reliability": offer.get("reliability2", offer.get("reliability")),
            "geolocation": offer.get("geolocation")}


def explain(spec, excluded, seen):
    """One sentence per constraint that excluded offers: which constraint, its value, which offers."""
    if not seen:
        return ("vast.ai answered no offer for %s x %d (the search itself filters on the GPU name and count, and "
                "rentable): widen spec.gpu or spec.gpu_count." % (
                    ", ".join(spec.get("gpu") or ["any GPU"]), int(spec.get("gpu_count") or 1)))
    parts = []
    limits = {"max_price": "max_price %s $/h" % spec.get("max_price"),
              "min_vram_gb": "min_vram_gb %s" % spec.get("min_vram_gb"),
              "min_reliability": "min_reliability %s" % spec.get("min_reliability"),
              "min_direct_ports": "min_direct_ports %s" % spec.get("min_direct_ports"),
              "regions": "regions %s" % ", ".join(spec.get("regions") or []),
              "gpu": "gpu %s" % ", ".join(spec.get("gpu") or []),
              "gpu_count": "gpu_count %s" % spec.get("gpu_count"),
              "bad_machine": "a machine recorded as bad (reports/bad_machines.json)",
              "rentable": "not rentable"}
    for name, offers in excluded.items():
        shown = ", ".join("%s (machine %s, %s $/h)" % (o["id"], o["machine_id"], o["price_per_hour"])
                          for o in offers[:6])
        parts.append("%s excluded %d offer(s): %s%s" % (
            limits.get(name, name), len(offers), shown, ", ..." if len(offers) > 6 else ""))
    return "%d offer(s) seen; %s." % (seen, "; ".join(parts))


def vast_ask_body(spec, label, offer=None):
    """The body of ``PUT /api/v0/asks/{offer_id}/`` (vast.ai create instance)."""
    body = {"image": spec["image"], "label": label, "runtype": "ssh", "target_state": "running"}
    if spec.get("disk_gb") is not None:
        body["disk"] = float(spec["disk_gb"])
    if spec.get("onstart"):
        body["onstart"] = str(spec["onstart"])
    if spec.get("env"):
        body["env"] = " ".join("-e %s=%s" % (k, v) for k, v in sorted(spec["env"].items()))
    if spec.get("interruptible"):
        price = offer_price(offer or {}) if offer else None
        bid = (offer or {}).get("min_bid")
        body["price"] = float(spec.get("max_price") or bid or price or 0.001)
    return body


# --- RunPod and Lambda ------------------------------------------------------------------------------------------

def runpod_create_body(spec, name):
    """The body of RunPod ``POST /v1/pods`` (PodCreateInput): direct SSH needs ``22/tcp`` exposed and a public IP."""
    body = {"name": name, "imageName": spec["image"], "computeType": "GPU", "gpuTypeIds": list(spec["gpu"]),
            "gpuTypePriority": "custom" if len(spec["gpu"]) > 1 else "availability",
            "gpuCount": int(spec.get("gpu_count") or 1), "ports": ["22/tcp"],
            "interruptible": bool(spec.get("interruptible")), "cloudType": spec.get("cloud_type") or "SECURE",
            "supportPublicIp": True}
    if spec.get("disk_gb") is not None:
        body["containerDiskInGb"] = int(spec["disk_gb"])
    if spec.get("volume_gb") is not None:
        body["volumeInGb"] = int(spec["volume_gb"])
    if spec.get("regions"):
        body["dataCenterIds"] = list(spec["regions"])
    env = dict(spec.get("env") or {})
    if spec.get("public_key"):
        env["PUBLIC_KEY"] = str(spec["public_key"]).strip()  # RunPod's images install it as authorized_keys
    if env:
        body["env"] = env
    return body


def lambda_launch_body(spec, name):
    """The body of Lambda ``POST /api/v1/instance-operations/launch`` (launchInstance_request): one instance."""
    body = {"region_name": spec["regions"][0], "instance_type_name": spec["instance_type"],
            "ssh_key_names": list(spec["ssh_key_names"]), "quantity": 1, "name": str(name)[:LAMBDA_NAME_MAX]}
    if spec.get("file_system_names"):
        body["file_system_names"] = list(spec["file_system_names"])
    return body


# --- idempotence by label ---------------------------------------------------------------------------------------

LABEL_KEY = {"vastai": "label", "runpod": "name", "lambda": "name"}
GONE = {"vastai": (), "runpod": ("TERMINATED",), "lambda": ("terminated", "terminating")}


def labelled(provider, records, name):
    """The records of ``provider`` that carry the rent's ``name`` and are not terminated, by id."""
    key = LABEL_KEY[provider]
    status_key = {"vastai": "actual_status", "runpod": "desiredStatus", "lambda": "status"}[provider]
    out = []
    for record in records or []:
        if not isinstance(record, dict) or str(record.get(key) or "") != str(name):
            continue
        if str(record.get(status_key) or "") in GONE[provider]:
            continue
        out.append(record)
    return sorted(out, key=lambda r: str(r.get("id")))


def machine_id(provider, record):
    """The machine an instance runs on (vast.ai ``machine_id``, RunPod ``machineId``); None for Lambda."""
    if not isinstance(record, dict):
        return None
    value = record.get({"vastai": "machine_id", "runpod": "machineId"}.get(provider, "")) if provider != "lambda" \
        else None
    return str(value) if value not in (None, "") else None


# --- the verdict on a new box -----------------------------------------------------------------------------------

# A box whose probe could not run because of the controller's own SSH settings is UNPROBED, not FAIL: its machine
# is not recorded as bad, and the rent stops renting (every next box would fail the same way, and bill).
UNPROBED = "UNPROBED"
SSH_AUTH_FAILED = "ssh_auth_failed"
SSH_HOST_KEY_FAILED = "ssh_host_key_failed"
CONTROLLER_CODES = (SSH_AUTH_FAILED, SSH_HOST_KEY_FAILED)

# ssh's own line that says nothing about the failure: a first contact's "Warning: Permanently added '[h]:p' (ED25519)
# to the list of known hosts." (its warnings' '@' frames are left out too)
_SSH_NOISE = re.compile(r"^Warning: Permanently added .* to the list of known hosts\.?$")
# OpenSSH's last words (exit status 255) when the controller's own settings made the login fail. The lines before
# them are the evidence, and stay in the finding: a key file missing ("Warning: Identity file ... not accessible",
# older "no such identity: ..."), unreadable ("Load key \"...\": bad permissions", "invalid format"), an agent that
# refused, a known_hosts line that differs ("REMOTE HOST IDENTIFICATION HAS CHANGED"), a new key under
# StrictHostKeyChecking=yes ("No ED25519 host key is known for ..."). The host key first: ssh checks it before it
# authenticates. A box whose sshd does not answer, resets or closes the connection, or a probe that runs past its
# timeout, is the box's (or its provider's) fault, and matches none.
_SSH_CONTROLLER = (
    (SSH_HOST_KEY_FAILED, re.compile(r"^Host key verification failed", re.M)),
    (SSH_AUTH_FAILED, re.compile(r"Permission denied \(|Permission denied, please try again"
                                 r"|Too many authentication failures|No more authentication methods to try")),
)

# what went wrong, whose fault it is, and what to check, when the controller could not log in or refused a host key
_CONTROLLER_ADVICE = {
    SSH_AUTH_FAILED: (
        "the controller could not log in to %d new box(es) over SSH",
        "this controller's SSH login (its key, its agent, the key the provider installs on new boxes, the user)",
        "Check, then rent again: the private key that ansible_ssh_private_key_file (or ansible_private_key_file) "
        "names exists and is readable by you only (mode 0600), or is loaded in ssh-agent (ssh-add -l) when it has a "
        "passphrase (the probe runs with BatchMode=yes: nothing prompts); its public key is the one the provider "
        "installs on new boxes (vast.ai: the account's SSH keys; RunPod: the account's SSH public key, or "
        "spec.public_key through rent_spec, with an image that installs PUBLIC_KEY; Lambda: spec.ssh_key_names); "
        "and the user (ansible_user: root on vast.ai and RunPod, ubuntu on Lambda)"),
    SSH_HOST_KEY_FAILED: (
        "the controller's SSH settings refused the host key of %d new box(es)",
        "this controller's known_hosts settings (a new box's key is known to nobody yet)",
        "Check, then rent again: a UserKnownHostsFile or StrictHostKeyChecking=yes in rent_ssh_common_args or "
        "ansible_ssh_common_args comes before the rent's own first-contact settings, and wins: drop it there, or "
        "remove the stale line that ssh names (ssh-keygen -R '[address]:port' -f FILE)"),
}


def ssh_text(stderr, limit=300):
    """ssh's stderr on one line, without its noise (a first contact's "Permanently added" warning, the '@' frames),
    its last ``limit`` characters: the decisive line comes last."""
    lines = [line.strip().strip("@").strip() for line in str(stderr or "").splitlines()]
    return " ".join(" ".join(line for line in lines if line and not _SSH_NOISE.match(line)).split())[-limit:]


def ssh_fault(stderr):
    """The finding code of an SSH failure (ssh exited 255) that the controller's own settings caused:
    ``ssh_auth_failed`` (its login was refused: the key, the agent, the user, the key the provider installs) or
    ``ssh_host_key_failed`` (its known_hosts settings refused the box's key); None for a failure that is the box's or
    its provider's (no answer, a connection reset or closed, a timeout, anything else)."""
    text = "\n".join(line.strip() for line in str(stderr or "").splitlines())
    for code, words in _SSH_CONTROLLER:
        if words.search(text):
            return code
    return None


def finding_code(finding):
    """The code of a box's finding (``code: message``), or None."""
    head = str(finding or "").split(":", 1)[0].strip()
    return head if head and " " not in head else None


def judge(probe):
    """(verdict, finding) of preflight_probe's result on a new box: its ``status`` and its first FAIL finding
    (``code: message``). A probe that failed, did not answer or gave no status is FAIL ``probe_failed: ...``, but
    UNPROBED ``ssh_auth_failed: ...`` or ``ssh_host_key_failed: ...`` when the controller's own SSH settings made it
    fail (its ``ssh_fault``, from ``ssh_fault``): that says nothing of the box."""
    if not isinstance(probe, dict) or probe.get("failed") or probe.get("unreachable") or not probe.get("status"):
        why = " ".join(str(((probe or {}).get("msg") if isinstance(probe, dict) else None)
                           or "the box did not answer").split())[:400]
        code = probe.get("ssh_fault") if isinstance(probe, dict) else None
        if code in CONTROLLER_CODES:
            return UNPROBED, "%s: %s" % (code, why[len("SSH failed: "):] if why.startswith("SSH failed: ") else why)
        return "FAIL", "probe_failed: %s" % why
    fails = []
    for part in ("inode_check", "gpu_health", "env_audit"):
        section = probe.get(part)
        for finding in (section or {}).get("findings") or [] if isinstance(section, dict) else []:
            if isinstance(finding, dict) and finding.get("level") == "FAIL":
                fails.append(finding)
    if fails:
        return "FAIL", "%s: %s" % (fails[0].get("code"), fails[0].get("message"))
    return str(probe["status"]), None


def stop_renting(boxes):
    """Why the rent must rent no more boxes, or None: a box that the controller could not probe for its own SSH
    settings (``ssh_auth_failed``, ``ssh_host_key_failed``) says that every next box would fail the same way, and
    bill. The message says what went wrong (ssh's words), whose fault it is, what became of the boxes (given back
    unprobed: the money-safe choice, since a box this controller cannot use still bills) and what to check."""
    hit = [b for b in boxes or [] if isinstance(b, dict) and finding_code(b.get("finding")) in CONTROLLER_CODES]
    if not hit:
        return None
    code = finding_code(hit[0]["finding"])
    what, whose, advice = _CONTROLLER_ADVICE[code]
    parts = ["%s: %s (%s)" % (code, what % len(hit), str(hit[0]["finding"]).split(":", 1)[1].strip().rstrip(".")),
             "The fault is %s, not the machines': no machine was recorded as bad, and no more boxes are rented, since "
             "each would fail the same way and bill" % whose]
    back = [str(b.get("name")) for b in hit if b.get("outcome") == "given back"]
    left = ["%s (instance %s)" % (b.get("name"), b.get("id")) for b in hit if b.get("outcome") != "given back"]
    if back:
        parts.append("Given back unprobed (this controller cannot use them as configured, and they bill): %s"
                     % ", ".join(back))
    if left:
        parts.append("NOT given back, and may still bill (destroy them: remote_gpu.trainer.instance state=absent): %s"
                     % ", ".join(left))
    if hit[0].get("ssh_command"):
        parts.append("Try the login by hand: %s" % hit[0]["ssh_command"])
    return "%s. %s." % (". ".join(parts), advice)
