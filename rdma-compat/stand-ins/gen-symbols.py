#!/usr/bin/env python3
# Regenerates the stand-ins' symbol tables (mlx5.symbols, mlx4.symbols, efa.symbols) from
# the installed rdma-core providers (objdump -T) and their headers (return kinds). Run it
# from rdma-compat/stand-ins/ after an rdma-core upgrade; commit the tables.
import re, subprocess, sys
libs = {"mlx5": ["mlx5dv.h"], "mlx4": ["mlx4dv.h"], "efa": ["efadv.h"]}
for lib, hdrs in libs.items():
    text = "".join(open("/usr/include/infiniband/" + h).read() for h in hdrs)
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    out = subprocess.run(["objdump", "-T", f"/usr/lib/x86_64-linux-gnu/lib{lib}.so.1"], capture_output=True, text=True).stdout
    rows = []
    for line in out.splitlines():
        f = line.split()
        if len(f) < 6 or f[1] != "g" or f[2] != "DF" or f[-2].startswith("("):
            continue
        name, ver = f[-1], f[-2]
        m = re.search(r"([A-Za-z_][\w\s\*]*?)\b" + re.escape(name) + r"\s*\(", text)
        kind = "int"
        if m:
            ret = " ".join(m.group(1).split())
            ret = re.sub(r"\b(static|inline|extern|__attribute__\w*)\b", "", ret).strip()
            if "*" in ret: kind = "ptr"
            elif ret.endswith("void"): kind = "void"
            elif ret.endswith("bool"): kind = "bool"
            else: kind = "int"
        else:
            kind = "int?"
        rows.append((name, ver, kind))
    with open(f"{lib}.symbols", "w") as fh:
        fh.write(f"# lib{lib}.so.1 stand-in: every function Debian's lib{lib}.so.1 exports (objdump -T), its\n# version node, and how the inert entry point returns (ptr: NULL, bool: false, void,\n# int: EOPNOTSUPP), taken from the prototypes in /usr/include/infiniband/{hdrs[0]}.\n")
        for r in sorted(rows): fh.write(" ".join(r) + "\n")
    print(lib, len(rows), sum(1 for r in rows if r[2]=="int?"), [r for r in rows if r[2]=="int?"][:5])
