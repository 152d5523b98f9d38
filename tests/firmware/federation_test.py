#!/usr/bin/env python3
"""The firmware example in a real federation: `fedrt serve` (a native build)
with mlp:784-16-10 and NDQSG, the firmware on a Cortex-M4 in QEMU whose UART
QEMU connects to the aggregator's TCP port, and three Linux `fedrt device`s,
for 5 rounds. Passes when the firmware's update is among the applied ones of
every round, no update is rejected, the test accuracy after the last round is
above the first round's, the firmware ends the training with status 0 and,
given RAM_BUDGET, the RAM it reports (its static block plus the heap's and
the stack's high-water marks) is within it.

Usage: federation_test.py FEDRT FIRMWARE_ELF DATA_DIR WORK_DIR [RAM_BUDGET]
"""
import json
import os
import re
import subprocess
import sys
import time

ROUNDS = 5
FIRMWARE_ID = "fw-0"
FIRMWARE_KEY = b"fedrt-firmware-key-0123456789abc"  # main.c's kKey


def main():
    fedrt, firmware, data, work = sys.argv[1:5]
    ram_budget = int(sys.argv[5]) if len(sys.argv) > 5 and sys.argv[5] else None
    os.makedirs(work, exist_ok=True)
    lines = [f"{FIRMWARE_ID} {FIRMWARE_KEY.hex()}"]
    for i in range(1, 4):
        key = os.urandom(32).hex()
        lines.append(f"dev-{i} {key}")
        path = os.path.join(work, f"dev-{i}.key")
        with open(path, "w") as f:
            f.write(f"dev-{i} {key}\n")
        os.chmod(path, 0o600)
    keys = os.path.join(work, "keys")
    with open(keys, "w") as f:
        f.write("\n".join(lines) + "\n")
    os.chmod(keys, 0o600)
    metrics = os.path.join(work, "metrics.jsonl")
    if os.path.exists(metrics):
        os.remove(metrics)

    children = []
    logs = {}

    def start(name, command, **kwargs):
        log = open(os.path.join(work, name + ".log"), "w")
        logs[name] = log.name
        child = subprocess.Popen(command, stdout=kwargs.get("stdout", log), stderr=log, text=True)
        children.append(child)
        return child

    try:
        serve = start("serve", [fedrt, "serve", "--host", "127.0.0.1", "--port", "0", "--key-file", keys, "--data", data,
                                "--model", "mlp:784-16-10", "--codec", "ndqsg", "--rounds", str(ROUNDS),
                                "--min-devices", "4", "--metrics", metrics], stdout=subprocess.PIPE)
        line = serve.stdout.readline()
        if not line.startswith("listening on port "):
            sys.exit(f"fedrt serve did not start: {line!r} (log {logs['serve']})")
        port = int(line.split()[-1])
        qemu = start("firmware", ["qemu-system-arm", "-M", "mps2-an386", "-nographic", "-monitor", "none",
                                  "-semihosting-config", "enable=on,target=native",
                                  "-chardev", f"socket,id=aggregator,host=127.0.0.1,port={port},reconnect=1",
                                  "-serial", "chardev:aggregator", "-kernel", firmware])
        for i in range(1, 4):
            start(f"dev-{i}", [fedrt, "device", "--server", f"127.0.0.1:{port}", "--id", f"dev-{i}", "--key-file",
                               os.path.join(work, f"dev-{i}.key"), "--data", data, "--model", "mlp:784-16-10",
                               "--devices", "3", "--index", str(i - 1)])
        deadline = time.monotonic() + 400
        for child in (serve, qemu):
            child.wait(timeout=max(1, deadline - time.monotonic()))
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
                child.wait()

    with open(logs["firmware"]) as f:
        firmware_log = f.read()
    print(firmware_log)
    failures = []
    if serve.returncode != 0:
        failures.append(f"fedrt serve exited with {serve.returncode}")
    if qemu.returncode != 0:
        failures.append(f"the firmware exited with {qemu.returncode}")
    rounds = [json.loads(l) for l in open(metrics)] if os.path.exists(metrics) else []
    applied = [r for r in rounds if r.get("applied")]
    for r in applied:
        ids = [d.get("device_id", d.get("id")) for d in r["per_device"]]
        print(f"round {r['round']}: updates {r['updates']}, rejected {r['rejected']}, "
              f"test accuracy {r['test_accuracy']:.4f}, from {', '.join(map(str, ids))}")
        if FIRMWARE_ID not in ids:
            failures.append(f"round {r['round']}: no update from {FIRMWARE_ID}")
        if r["rejected"] != 0:
            failures.append(f"round {r['round']}: {r['rejected']} updates rejected")
    if len(applied) != ROUNDS or len(rounds) != ROUNDS:
        failures.append(f"{len(applied)} of {len(rounds)} rounds applied, {ROUNDS} expected")
    elif not applied[-1]["test_accuracy"] > applied[0]["test_accuracy"]:
        failures.append("the test accuracy did not rise")
    if "training finished" not in firmware_log:
        failures.append("the firmware did not see the training end")
    ram = re.search(r"RAM (\d+) bytes", firmware_log)
    if ram_budget is not None:
        if ram is None:
            failures.append("the firmware reported no RAM figure")
        elif int(ram.group(1)) > ram_budget:
            failures.append(f"the firmware used {ram.group(1)} bytes of RAM, the budget is {ram_budget}")
        else:
            print(f"RAM {ram.group(1)} bytes, within the budget of {ram_budget}")
    for failure in failures:
        print("FAILED:", failure)
    if failures:
        for name, path in logs.items():
            print(f"---- {name} ({path})")
            print(open(path).read()[-3000:])
    sys.exit(1 if failures else 0)


main()
