"""``--query-gpu`` fields: where each value lives in the ``-q`` model and how the CSV prints it.

Every entry names the ``-q`` text path(s) it is read from (first path present wins; several paths cover the
label changes between driver branches) and a *kind* that says how the CSV spells it. The spellings are the
ones seen in the real ``--query-gpu ... --format=csv`` captures in tests/fixtures/nvidia/query-gpu/:
``[N/A]`` for a missing value, unit suffix after a space, the unit in brackets in the header.

Fields that are valid for the driver but absent from ``-q`` (compute_cap, gsp.mode.*, vgpu caps, platform.*
numeric ids, inforom.checksum_validation, ...) are listed in ``NOT_DERIVABLE``; the emulator prints ``[N/A]``
for them and README says so.
"""
from __future__ import annotations

NOVALUE_WORDS = ("N/A", "Requested functionality has been deprecated", "Unknown Error", "Not Supported",
                 "Function Not Found", "Insufficient Permissions")

# kinds (how a -q value becomes a CSV cell):
# str    : the text value verbatim ("N/A" and the other no-value words become "[...]")
# bare   : verbatim, no brackets around N/A (fabric.*, seen so in every capture)
# unit   : "81559 MiB" -> "81559 MiB" (csv) / "81559" (nounits); the header gets " [MiB]"
# draw   : unit, average power or the instantaneous reading when the average is N/A
# temp   : "59 C" -> "59"; a missing value stays bare "N/A" (temperature.memory on GeForce/L40S)
# temp_b : like temp, but a missing value is "[N/A]" (temperature.gpu.tlimit)
# width  : "16x" -> "16"
# banks  : "2560 bank(s)" -> "2560"
# pct2   : "100.00%" -> "100.00 %"
# ecc    : computed from the ECC Errors block (sums for .total and .sram)

R = "Clocks Event Reasons"
RO = "Clocks Throttle Reasons"  # spelling before R535
RC = "Clocks Event Reasons Counters"


def _pw(*labels):
    # R535 renamed "Power Readings" to "GPU Power Readings"; 610 moved the limits under "GPU Ceiling Power Limit"
    return [base + label for base in ("GPU Power Readings/", "Power Readings/",
                                      "GPU Power Readings/GPU Ceiling Power Limit/") for label in labels]


def _reason(label):
    return [R + "/" + label, RO + "/" + label]


def _section(prefix, section, kind, unit, labels):
    """Rows of the fields ``prefix + key`` that are read from ``section/label``, all of one kind and unit."""
    return {prefix + key: ([section + "/" + label], kind, unit) for key, label in labels.items()}


# field -> (paths, kind, unit)
FIELDS = {
    "driver_version": (["@Driver Version"], "str", None),
    "kmd_version": (["@KMD Version", "@Driver Version"], "str", None),
    "name": (["Product Name"], "str", None),
    "serial": (["Serial Number"], "str", None),
    "uuid": (["GPU UUID"], "str", None),
    "pci.bus_id": (["PCI/Bus Id"], "str", None),
    "pci.domain": (["PCI/Domain"], "str", None),
    "pci.bus": (["PCI/Bus"], "str", None),
    "pci.device": (["PCI/Device"], "str", None),
    "pci.baseClass": (["PCI/Base Classcode"], "str", None),
    "pci.subClass": (["PCI/Sub Classcode"], "str", None),
    "pci.device_id": (["PCI/Device Id"], "str", None),
    "pci.sub_device_id": (["PCI/Sub System Id"], "str", None),
    "pcie.link.gen.current": (["PCI/GPU Link Info/PCIe Generation/Current"], "str", None),
    "pcie.link.gen.gpucurrent": (["PCI/GPU Link Info/PCIe Generation/Device Current"], "str", None),
    "pcie.link.gen.max": (["PCI/GPU Link Info/PCIe Generation/Max"], "str", None),
    "pcie.link.gen.gpumax": (["PCI/GPU Link Info/PCIe Generation/Device Max"], "str", None),
    "pcie.link.gen.hostmax": (["PCI/GPU Link Info/PCIe Generation/Host Max"], "str", None),
    "pcie.link.width.current": (["PCI/GPU Link Info/Link Width/Current"], "width", None),
    "pcie.link.width.max": (["PCI/GPU Link Info/Link Width/Max"], "width", None),
    "display_mode": (["Display Mode"], "str", None),
    "display_attached": (["Display Attached"], "str", None),
    "display_active": (["Display Active"], "str", None),
    "persistence_mode": (["Persistence Mode"], "str", None),
    "addressing_mode": (["Addressing Mode"], "str", None),
    "accounting.mode": (["Accounting Mode"], "str", None),
    "accounting.buffer_size": (["Accounting Mode Buffer Size"], "str", None),
    "driver_model.current": (["Driver Model/Current"], "str", None),
    "driver_model.pending": (["Driver Model/Pending"], "str", None),
    "vbios_version": (["VBIOS Version"], "str", None),
    "inforom.img": (["Inforom Version/Image Version"], "str", None),
    "inforom.oem": (["Inforom Version/OEM Object"], "str", None),
    "inforom.ecc": (["Inforom Version/ECC Object"], "str", None),
    "inforom.pwr": (["Inforom Version/Power Management Object"], "str", None),
    "gpu_recovery_action": (["GPU Recovery Action"], "str", None),
    "gom.current": (["GPU Operation Mode/Current"], "str", None),
    "gom.pending": (["GPU Operation Mode/Pending"], "str", None),
    "fan.speed": (["Fan Speed"], "unit", "%"),
    "pstate": (["Performance State"], "str", None),
    "clocks_event_reasons.gpu_idle": (_reason("Idle"), "str", None),
    "clocks_event_reasons.applications_clocks_setting": (_reason("Applications Clocks Setting"), "str", None),
    "clocks_event_reasons.sw_power_cap": (_reason("SW Power Cap"), "str", None),
    "clocks_event_reasons.hw_slowdown": (_reason("HW Slowdown"), "str", None),
    "clocks_event_reasons.hw_thermal_slowdown": (_reason("HW Slowdown/HW Thermal Slowdown"), "str", None),
    "clocks_event_reasons.hw_power_brake_slowdown": (_reason("HW Slowdown/HW Power Brake Slowdown"), "str", None),
    "clocks_event_reasons.sw_thermal_slowdown": (_reason("SW Thermal Slowdown"), "str", None),
    "clocks_event_reasons.sync_boost": (_reason("Sync Boost"), "str", None),
    "clocks_event_reasons_counters.sw_power_cap": ([RC + "/SW Power Capping"], "unit", "us"),
    "clocks_event_reasons_counters.sync_boost": ([RC + "/Sync Boost"], "unit", "us"),
    "clocks_event_reasons_counters.sw_thermal_slowdown": ([RC + "/SW Thermal Slowdown"], "unit", "us"),
    "clocks_event_reasons_counters.hw_thermal_slowdown": ([RC + "/HW Thermal Slowdown"], "unit", "us"),
    "clocks_event_reasons_counters.hw_power_brake_slowdown": ([RC + "/HW Power Braking"], "unit", "us"),
    **_section("memory.", "FB Memory Usage", "unit", "MiB",
               {"total": "Total", "reserved": "Reserved", "used": "Used", "free": "Free"}),
    "compute_mode": (["Compute Mode"], "str", None),
    "utilization.gpu": (["Utilization/GPU", "Utilization/Gpu"], "unit", "%"),
    **_section("utilization.", "Utilization", "unit", "%",
               {"memory": "Memory", "encoder": "Encoder", "decoder": "Decoder", "jpeg": "JPEG", "ofa": "OFA"}),
    **_section("encoder.stats.", "Encoder Stats", "str", None,
               {"sessionCount": "Active Sessions", "averageFps": "Average FPS", "averageLatency": "Average Latency"}),
    "dramEncryption.mode.current": (["DRAM Encryption Mode/Current"], "str", None),
    "dramEncryption.mode.pending": (["DRAM Encryption Mode/Pending"], "str", None),
    "ecc.mode.current": (["ECC Mode/Current"], "str", None),
    "ecc.mode.pending": (["ECC Mode/Pending"], "str", None),
    "retired_pages.single_bit_ecc.count": (["Retired Pages/Single Bit ECC"], "str", None),
    "retired_pages.double_bit.count": (["Retired Pages/Double Bit ECC"], "str", None),
    "retired_pages.pending": (["Retired Pages/Pending Page Blacklist", "Retired Pages/Pending"], "str", None),
    **_section("remapped_rows.", "Remapped Rows", "str", None,
               {"correctable": "Correctable Error", "uncorrectable": "Uncorrectable Error",
                "correctable_inactive": "Inactive Correctable Error",
                "uncorrectable_inactive": "Inactive Uncorrectable Error",
                "pending": "Pending", "failure": "Remapping Failure Occurred"}),
    **_section("remapped_rows.histogram.", "Remapped Rows/Bank Remap Availability Histogram", "banks", None,
               {"max": "Max", "high": "High", "partial": "Partial", "low": "Low", "none": "None"}),
    "temperature.gpu": (["Temperature/GPU Current Temp"], "temp", None),
    "temperature.gpu.tlimit": (["Temperature/GPU T.Limit Temp"], "temp_b", None),
    "temperature.memory": (["Temperature/Memory Current Temp"], "temp", None),
    "power.draw": (_pw("Average Power Draw", "Power Draw"), "draw", "W"),
    "power.draw.average": (_pw("Average Power Draw"), "unit", "W"),
    "power.draw.instant": (_pw("Instantaneous Power Draw"), "unit", "W"),
    "power.limit": (_pw("Requested Power Limit", "Power Limit"), "unit", "W"),
    "enforced.power.limit": (_pw("Current Power Limit", "Enforced Power Limit"), "unit", "W"),
    "power.default_limit": (_pw("Default Power Limit"), "unit", "W"),
    "power.min_limit": (_pw("Min Power Limit"), "unit", "W"),
    "power.max_limit": (_pw("Max Power Limit"), "unit", "W"),
    **_section("module.", "Module Power Readings", "unit", "W",
               {"power.draw.average": "Average Power Draw", "power.draw.instant": "Instantaneous Power Draw",
                "power.limit": "Requested Power Limit", "enforced.power.limit": "Current Power Limit",
                "power.default_limit": "Default Power Limit", "power.min_limit": "Min Power Limit",
                "power.max_limit": "Max Power Limit"}),
    "edpp_multiplier": (["EDPp Multiplier"], "pct2", "%"),
    **_section("clocks.current.", "Clocks", "unit", "MHz",
               {"graphics": "Graphics", "sm": "SM", "memory": "Memory", "video": "Video"}),
    **_section("clocks.applications.", "Applications Clocks", "unit", "MHz",
               {"graphics": "Graphics", "memory": "Memory"}),
    **_section("clocks.default_applications.", "Default Applications Clocks", "unit", "MHz",
               {"graphics": "Graphics", "memory": "Memory"}),
    **_section("clocks.max.", "Max Clocks", "unit", "MHz", {"graphics": "Graphics", "sm": "SM", "memory": "Memory"}),
    "mig.mode.current": (["MIG Mode/Current"], "str", None),
    "mig.mode.pending": (["MIG Mode/Pending"], "str", None),
    "c2c.mode": (["GPU C2C Mode"], "str", None),
    **_section("protected_memory.", "Conf Compute Protected Memory Usage", "unit", "MiB",
               {"total": "Total", "used": "Used", "free": "Free"}),
    **_section("fabric.", "Fabric", "bare", None,
               {"state": "State", "status": "Status", "cliqueId": "CliqueId", "clusterUuid": "ClusterUUID"}),
    **_section("fabric.health.", "Fabric/Health", "bare", None,
               {"summary": "Summary", "bandwidth": "Bandwidth",
                "route_recovery_in_progress": "Route Recovery in progress", "route_unhealthy": "Route Unhealthy",
                "access_timeout_recovery": "Access Timeout Recovery",
                "incorrect_configuration": "Incorrect Configuration", "partition_assigned": "Partition Assigned"}),
    "platform.module_id": (["Platform Info/Module Id"], "str", None),
}

# ECC counters: (volatile|aggregate, corrected|uncorrected, location) -> text labels summed
_ECC_NEW = {
    ("corrected", "dram"): ["DRAM Correctable"],
    ("corrected", "device_memory"): ["DRAM Correctable"],
    ("corrected", "sram"): ["SRAM Correctable"],
    ("corrected", "total"): ["SRAM Correctable", "DRAM Correctable"],
    ("uncorrected", "dram"): ["DRAM Uncorrectable"],
    ("uncorrected", "device_memory"): ["DRAM Uncorrectable"],
    ("uncorrected", "sram"): ["SRAM Uncorrectable Parity", "SRAM Uncorrectable SEC-DED"],
    ("uncorrected", "sram.parity"): ["SRAM Uncorrectable Parity"],
    ("uncorrected", "sram.secded"): ["SRAM Uncorrectable SEC-DED"],
    ("uncorrected", "total"): ["SRAM Uncorrectable Parity", "SRAM Uncorrectable SEC-DED", "DRAM Uncorrectable"],
}
_ECC_OLD_LOC = {"device_memory": "Device Memory", "register_file": "Register File", "l1_cache": "L1 Cache",
                "l2_cache": "L2 Cache", "texture_memory": "Texture Memory", "cbu": "CBU", "total": "Total"}
_ECC_OLD_KIND = {"corrected": "Single Bit", "uncorrected": "Double Bit"}

for _scope, _Scope in (("volatile", "Volatile"), ("aggregate", "Aggregate")):
    for _kind in ("corrected", "uncorrected"):
        for _loc in ("device_memory", "dram", "register_file", "l1_cache", "l2_cache", "texture_memory", "cbu",
                     "sram", "total"):
            FIELDS["ecc.errors.%s.%s.%s" % (_kind, _scope, _loc)] = (
                ("ecc", _Scope, _kind, _loc), "ecc", None)
    FIELDS["ecc.errors.uncorrected.%s.sram.parity" % _scope] = (
        ("ecc", _Scope, "uncorrected", "sram.parity"), "ecc", None)
    FIELDS["ecc.errors.uncorrected.%s.sram.secded" % _scope] = (
        ("ecc", _Scope, "uncorrected", "sram.secded"), "ecc", None)
FIELDS["ecc.errors.uncorrected.aggregate.sram.thresholdExceeded"] = (
    ["ECC Errors/Aggregate/SRAM Threshold Exceeded"], "str", None)
for _loc, _lab in (("l2", "SRAM L2"), ("sm", "SRAM SM"), ("mcu", "SRAM Microcontroller"), ("pcie", "SRAM PCIE"),
                   ("other", "SRAM Other")):
    FIELDS["ecc.errors.uncorrected.aggregate.sram." + _loc] = (
        ["ECC Errors/Aggregate Uncorrectable SRAM Sources/" + _lab], "str", None)

# clocks_throttle_reasons.X is the pre-R535 name of clocks_event_reasons.X (help: '"clocks_event_reasons.X" or
# "clocks_throttle_reasons.X"').
for _f in [f for f in FIELDS if f.startswith("clocks_event_reasons.")]:
    FIELDS["clocks_throttle_reasons." + _f.split(".", 1)[1]] = FIELDS[_f]

# Bit of each reason in clocks_event_reasons.active / .supported (nvmlClocksEventReason* values).
REASON_BITS = [
    ("Idle", 0x1), ("Applications Clocks Setting", 0x2), ("SW Power Cap", 0x4), ("HW Slowdown", 0x8),
    ("Sync Boost", 0x10), ("SW Thermal Slowdown", 0x20), ("HW Slowdown/HW Thermal Slowdown", 0x40),
    ("HW Slowdown/HW Power Brake Slowdown", 0x80), ("Display Clock Setting", 0x100),
]

COMPUTED = {"timestamp", "count", "index", "clocks_event_reasons.active", "clocks_event_reasons.supported",
            "clocks_throttle_reasons.active", "clocks_throttle_reasons.supported"}

# Valid on some driver but not present in -q: the emulator prints [N/A] for them (documented in README).
NOT_DERIVABLE = (
    "compute_cap", "inforom.checksum_validation", "gsp.mode.current", "gsp.mode.default", "power.management",
    "platform.chassis_serial_number", "platform.slot_number", "platform.tray_index", "platform.host_id",
    "platform.peer_type", "platform.gpu_fabric_guid", "hostname", "vgpu_driver_capability.*",
    "vgpu_device_capability.*", "power_smoothing.*", "clocks.max.video", "gpu.base.*", "bbx.time_run",
    "clocks_event_reasons.display_clocks_setting",
)


def _novalue(v):
    return v.strip() in NOVALUE_WORDS or not v.strip()


def _load_units():
    import os
    units = {}
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "query-gpu-header-units.DERIVED.tsv")
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            if line.strip() and not line.startswith("#"):
                k, u = line.rstrip("\n").split("\t")
                units[k] = u
    return units


UNITS = _load_units()


def header_unit(field):
    spec = FIELDS.get(field)
    if spec and spec[2]:
        return spec[2]
    return UNITS.get(field)


def _lookup(gpu, cap, paths):
    for p in paths:
        if p.startswith("@"):
            v = cap.header.get(p[1:])
            if v is not None:
                return v.split(" [")[0] if p == "@Driver Version" else v
        elif gpu.has(p):
            return gpu.get(p, "")
    return None


def _ecc(gpu, scope, kind, loc):
    base = "ECC Errors/" + scope + "/"
    if gpu.has(base + "SRAM Correctable") or gpu.has(base + "DRAM Correctable"):
        labels = _ECC_NEW.get((kind, loc))
        if not labels:
            return None
        vals = [gpu.get(base + label) for label in labels]
        if any(v is None for v in vals):
            return None
        if any(_novalue(v) for v in vals):
            return vals[0] if len(vals) == 1 else "N/A"
        return str(sum(int(v) for v in vals))
    old = _ECC_OLD_LOC.get(loc)
    if old:
        return gpu.get(base + _ECC_OLD_KIND[kind] + "/" + old)
    return None


def fmt(kind, _unit, value, nounits):
    """CSV spelling of a -q text value."""
    if value is None:
        return "[N/A]"
    v = value.strip()
    if kind in ("temp", "temp_b"):
        if _novalue(v):
            return "N/A" if kind == "temp" else "[N/A]"
        return v[:-2] if v.endswith(" C") else v
    if kind == "bare":
        return v
    if _novalue(v):
        return "[%s]" % (v or "N/A")
    if kind == "width":
        return v[:-1] if v.endswith("x") else v
    if kind == "banks":
        return v.split(" ")[0]
    if kind == "pct2":
        v = v.rstrip("%").strip() + " %"
    if kind in ("unit", "pct2") and nounits:
        return v.rsplit(" ", 1)[0] if " " in v else v
    return v


def reason_mask(gpu, active_only):
    mask = 0
    for label, bit in REASON_BITS:
        for base in (R, RO):
            v = gpu.get(base + "/" + label)
            if v is not None:
                if not active_only or v.strip() == "Active":
                    mask |= bit
                break
    return "0x%016X" % mask


def value(field, gpu, gpu_index, cap, nounits, timestamp):
    """The CSV cell for ``field`` on ``gpu`` (``field`` already resolved from any alias)."""
    if field == "timestamp":
        return timestamp
    if field == "count":
        return str(len(cap.gpus))
    if field == "index":
        return str(gpu_index)
    if field.endswith("_reasons.active"):
        return reason_mask(gpu, True)
    if field.endswith("_reasons.supported"):
        return reason_mask(gpu, False)
    if field == "power.management" and cap.driver and int(cap.driver.split(".")[0]) >= 590:
        return "[Requested functionality has been deprecated]"  # every 590+ capture; absent from -q
    spec = FIELDS.get(field)
    if spec is None:
        return "[N/A]"
    paths, kind, unit = spec
    if kind == "draw":  # average when the GPU reports it, else the instantaneous reading (RTX 2080 SUPER 595+)
        v = _lookup(gpu, cap, paths)
        if v is None or _novalue(v):
            v = _lookup(gpu, cap, _pw("Instantaneous Power Draw")) or v
        return fmt("unit", unit, v, nounits)
    if kind == "ecc":
        return fmt("str", None, _ecc(gpu, *paths[1:]), nounits)
    return fmt(kind, unit, _lookup(gpu, cap, paths), nounits)
