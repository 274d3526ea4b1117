"""A stand-in for your training script, for trying launch, patrol and teardown on the lab (see `make demo`).

python train.py --config configs/a.yaml: prints one line per epoch (patrol shows the latest as the job's progress),
then writes best.txt into $TRAINER_OUTPUT_DIR, which launch copies, verified, to the box's durable disk.
"""
import argparse
import os
import time

parser = argparse.ArgumentParser()
parser.add_argument("--config", required=True)
args = parser.parse_args()
with open(args.config, encoding="utf-8") as fh:
    config = dict(line.split(":", 1) for line in fh.read().splitlines() if ":" in line)
epochs = int(config.get("epochs", 8))
for epoch in range(1, epochs + 1):
    time.sleep(float(config.get("seconds_per_epoch", 5)))
    print("epoch %d/%d lr %s" % (epoch, epochs, config.get("lr", "?").strip()), flush=True)
with open(os.path.join(os.environ.get("TRAINER_OUTPUT_DIR", "."), "best.txt"), "w", encoding="utf-8") as fh:
    fh.write("best of %s\n" % args.config)
