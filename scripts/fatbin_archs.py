#!/usr/bin/env python3
"""fatbin_archs.py — which GPU architectures a binary's CUDA code is built for.

Reads the .nv_fatbin section (objcopy --dump-section) and walks its fat binaries: a header
(magic 0xBA55ED50, version, header size, payload size), then entries, each with a header
whose kind is 1 (PTX) or 2 (ELF: machine code, SASS) and whose architecture (sm_XY as XY)
is the 32-bit word at offset 28. Prints one line per binary: `PATH sass=80,90 ptx=90`.
No cuobjdump needed (the build machine's toolkit has none).
Usage: python3 scripts/fatbin_archs.py BINARY... [--need-sass SM]
  --need-sass SM: exit 1 naming every binary without machine code for sm_SM.
Exit status 2 with one line `fatbin_archs: error: ...` for a file that cannot be read or
holds no CUDA code.
"""
import argparse
import os
import struct
import subprocess
import sys
import tempfile

MAGIC = 0xBA55ED50


class FatbinError(Exception):
    pass


def archs(path):
    with tempfile.TemporaryDirectory() as tmp:
        dump = os.path.join(tmp, "fatbin")
        r = subprocess.run(["objcopy", "--dump-section", f".nv_fatbin={dump}", path, os.path.join(tmp, "copy")],
                           capture_output=True, text=True)
        if r.returncode != 0 or not os.path.exists(dump):
            raise FatbinError(f"{path}: no .nv_fatbin section ({(r.stderr.strip().splitlines() or ['no CUDA code'])[-1]})")
        data = open(dump, "rb").read()
    found = {1: set(), 2: set()}
    i = 0
    while i + 16 <= len(data):
        magic, _, header, size = struct.unpack_from("<IHHQ", data, i)
        if magic != MAGIC:
            i += 8   # fat binaries are 8-byte aligned in the section
            continue
        j, end = i + header, i + header + size
        while j + 32 <= end:
            kind, _, entry_header, payload = struct.unpack_from("<HHIQ", data, j)
            if kind in found:
                found[kind].add(struct.unpack_from("<I", data, j + 28)[0])
            if entry_header == 0:
                break
            j += entry_header + payload
        i = end
    if not found[1] and not found[2]:
        raise FatbinError(f"{path}: .nv_fatbin holds no PTX or machine code")
    return sorted(found[2]), sorted(found[1])


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("binaries", nargs="+")
    p.add_argument("--need-sass", type=int)
    a = p.parse_args()
    lacking = []
    for path in a.binaries:
        sass, ptx = archs(path)
        print(f"{path} sass={','.join(map(str, sass)) or '-'} ptx={','.join(map(str, ptx)) or '-'}")
        if a.need_sass is not None and a.need_sass not in sass:
            lacking.append(path)
    if lacking:
        print(f"fatbin_archs: no sm_{a.need_sass} machine code in: {' '.join(lacking)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (FatbinError, OSError) as e:
        print(f"fatbin_archs: error: {e}", file=sys.stderr)
        sys.exit(2)
