"""Resource usage of a compiled sm_90 kernel (registers, spills), read with the cuobjdump that ships with triton."""
from __future__ import annotations

import os
import subprocess
import tempfile


def resource_usage(cubin: bytes) -> dict[str, int]:
    """{"REG": registers per thread, "STACK": stack bytes per thread (where ptxas spills registers), "LOCAL": ...}
    of the cubin's kernel."""
    import triton

    tool = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        usage = subprocess.run([tool, "--dump-resource-usage", f.name], capture_output=True, text=True,
                               check=True).stdout
    line = next(x for x in usage.splitlines() if "REG:" in x)
    return {k: int(v) for k, v in (item.split(":") for item in line.split() if item.split(":")[-1].isdigit())}
