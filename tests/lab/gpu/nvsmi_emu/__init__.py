"""GPU emulator for the lab: replays real nvidia-smi captures (see ../README.md).

Standard library only; imported on every fake nvidia-smi/dmesg/journalctl call, so keep imports light.
"""
