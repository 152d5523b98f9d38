#!/usr/bin/env python3
"""Flash used by each part of a firmware image, from its GNU ld map file.

Usage (the firmware_size_report target and the firmware_size_test run it):
  size_report.py --map fedrt_firmware.map --elf fedrt_firmware \
      --component codecs=libfedrt_codecs.a ... [--nm arm-none-eabi-nm] \
      [--budget-kib 96]

Flash is what `arm-none-eabi-size` calls text + data: every input section
the map places in .text (code and constants), the ARM unwind tables, the
constructor tables and the initial values of .data. Each input section counts
for the file the map names beside it:
  - a member of one of the --component archives: that fedrt component;
  - the C and C++ libraries (libc, libm, libstdc++, libgcc, libnosys);
  - any other object by its own name (the application, the board).
With link-time optimization the core's code comes out of the compiler as
ltrans objects that no longer say which archive each function came from: the
core's total stays exact (everything in ltrans objects), and it is split
among the components by the image's symbols (arm-none-eabi-nm), each counted
for the archive that defines a symbol of that name. What no symbol names
(merged string literals, alignment) is reported as "not attributed".

--budget-kib N: the fedrt core (every component, attributed or not) must be at
most N KiB; the exit status is 1 if it is larger.
"""
import argparse
import collections
import os
import re
import subprocess
import sys

FLASH_SECTIONS = re.compile(r"^\.(text|rodata|ARM\.extab|ARM\.exidx|preinit_array|init_array|fini_array|data)\b")
# One input section: " .name 0xADDR 0xSIZE file" (the name may sit alone on the line before).
ENTRY = re.compile(r"^ (\S+)?\s+0x([0-9a-f]+)\s+0x([0-9a-f]+)(?:\s+(\S.*?))?\s*$")
LIBRARIES = ("libc.a", "libc_nano.a", "libm.a", "libstdc++.a", "libstdc++_nano.a", "libsupc++.a", "libgcc.a",
             "libnosys.a", "libg.a", "libg_nano.a")
LTO_SUFFIX = re.compile(r"\.(constprop|isra|part|lto_priv|cold|localalias)(\.\d+)?")


SECTIONS_TOTAL = "<output sections>"


def input_sizes(map_path):
    """{file: flash bytes} over the map's flash output sections, and under
    SECTIONS_TOTAL the sizes of those sections (what arm-none-eabi-size adds)."""
    with open(map_path) as f:
        lines = f.read().split("\n")
    start = next(i for i, line in enumerate(lines) if line.startswith("Linker script and memory map"))
    sizes = collections.Counter()
    output = None
    pending = None
    end = 0  # of the input sections so far in this output section
    for line in lines[start:]:
        if line and not line.startswith(" "):
            fields = line.split()
            output = fields[0]
            end = 0
            if FLASH_SECTIONS.match(output) and len(fields) >= 3 and fields[2].startswith("0x"):
                sizes[SECTIONS_TOTAL] += int(fields[2], 16)
            continue
        if output is None or not FLASH_SECTIONS.match(output):
            continue
        m = ENTRY.match(line)
        if m:
            name = m.group(1) or pending
            pending = None
            address, size = int(m.group(2), 16), int(m.group(3), 16)
            # Merged string sections are listed with their size before
            # merging, overlapping the previous ones: count new bytes only.
            new = max(0, address + size - max(address, end))
            end = max(end, address + size)
            if name != "*fill*" and m.group(4):
                sizes[m.group(4)] += new
        else:
            text = line.strip()
            pending = text if text.startswith(".") and len(text.split()) == 1 else None
    # Fill between input sections, and what merging saved beyond the overlaps.
    sizes["alignment padding"] = sizes[SECTIONS_TOTAL] - sum(v for k, v in sizes.items() if k != SECTIONS_TOTAL)
    return sizes


def archive_of(input_file):
    m = re.match(r"^(.*\.a)\((.*)\)$", input_file)
    return (m.group(1), m.group(2)) if m else (None, input_file)


def image_symbols(nm, elf):
    """(name, size) of the image's code and constants."""
    out = subprocess.run([nm, "-S", elf], capture_output=True, text=True, check=True).stdout
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 4 and parts[2].lower() in "tdr":
            yield parts[3], int(parts[1], 16)


def archive_symbols(readelf, archive):
    """Names of the functions and objects an archive's members define,
    local ones included, from the ELF symbol tables (the fat LTO objects'
    machine code: nm would read the LTO symbol table, globals only)."""
    out = subprocess.run([readelf, "-sW", archive], capture_output=True, text=True, check=True).stdout
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 8 and parts[3] in ("FUNC", "OBJECT") and parts[6] != "UND":
            yield parts[7]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--map", required=True)
    parser.add_argument("--elf", required=True)
    parser.add_argument("--nm", default="arm-none-eabi-nm")
    parser.add_argument("--readelf", default="arm-none-eabi-readelf")
    parser.add_argument("--component", action="append", default=[], metavar="NAME=ARCHIVE")
    parser.add_argument("--budget-kib", type=float)
    args = parser.parse_args()

    components = collections.OrderedDict()
    for item in args.component:
        name, _, path = item.partition("=")
        components[os.path.basename(path)] = (name, path)

    core = collections.Counter()
    libraries = collections.Counter()
    others = collections.Counter()
    lto = 0
    sizes = input_sizes(args.map)
    image = sizes.pop(SECTIONS_TOTAL)
    for input_file, size in sizes.items():
        archive, member = archive_of(input_file)
        base = os.path.basename(archive) if archive else None
        if base in components:
            core[components[base][0]] += size
        elif base in LIBRARIES:
            libraries[base] += size
        elif ".ltrans" in member:
            lto += size
        else:
            others[os.path.basename(member).replace(".obj", "").replace(".o", "")] += size

    if lto:
        # Which component defines each of the image's symbols.
        owner = {}
        for name, path in components.values():
            for symbol in archive_symbols(args.readelf, path):
                owner.setdefault(symbol, name)
        attributed = collections.Counter()
        for symbol, size in image_symbols(args.nm, args.elf):
            name = owner.get(symbol) or owner.get(LTO_SUFFIX.sub("", symbol))
            if name:
                attributed[name] += size
        # A symbol defined in an archive and linked from a non-LTO object is
        # already in `core`; attribute at most what the ltrans objects hold.
        scale = min(1.0, lto / max(1, sum(attributed.values())))
        shares = {name: int(size * scale) for name, size in attributed.items()}
        for name, size in shares.items():
            core[name] += size
        core["not attributed (strings, merged constants)"] += lto - sum(shares.values())

    total_core = sum(core.values())
    total = total_core + sum(libraries.values()) + sum(others.values())
    assert total == image, f"the parts add up to {total} bytes, the map's sections to {image}"
    kib = lambda n: f"{n / 1024:.1f} KiB"
    print(f"firmware size report: {os.path.basename(args.elf)}" + (" (link-time optimized)" if lto else ""))
    print(f"  {'part':<48} {'flash bytes':>12}")
    for name, _ in components.values():
        print(f"  fedrt {name:<42} {core[name]:>12,}")
    if lto:
        name = "not attributed (strings, merged constants)"
        print(f"  fedrt {name:<42} {core[name]:>12,}")
    print(f"  {'fedrt core in all':<48} {total_core:>12,}  ({kib(total_core)})")
    for name, size in libraries.most_common():
        print(f"  {name:<48} {size:>12,}")
    for name, size in others.most_common():
        print(f"  {name:<48} {size:>12,}")
    print(f"  {'image (text + data)':<48} {total:>12,}  ({kib(total)})")
    if args.budget_kib is not None:
        budget = int(args.budget_kib * 1024)
        verdict = "within" if total_core <= budget else "OVER"
        print(f"  fedrt core {kib(total_core)} {verdict} the budget of {args.budget_kib:g} KiB "
              f"({budget - total_core:+,} bytes)")
        return 0 if total_core <= budget else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
