"""The lab fleet: simulated GPU rentals on this machine, built from real parts.

Modules:
  state     -- paths, the fleet record (fleet.json), PID/mount bookkeeping, teardown
  inventory -- the default layout (platform, region, scenario, variants) and the YAML inventory
  instance  -- host-side preparation of one instance and its start inside namespaces
  nsinit    -- runs as PID 1 inside an instance's namespaces: builds its root, then execs sshd
  proxy     -- the tinyproxy behind /etc/network_turbo
  relay     -- the latency relay in front of every sshd (--rtt-ms, --jitter-ms): the lab's network
  gpu       -- registering GPU processes with the emulator's runtime directory
  cli       -- the `tests/lab/fleet` command

Standard library only.
"""
