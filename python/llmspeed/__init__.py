"""llmspeed: the binary is installed as a script (`llmspeed` on PATH); this package only finds it."""

import os
import sys
import sysconfig


def find_llmspeed_bin() -> str:
    """The path of the installed `llmspeed` binary: this environment's scripts folder, then the
    user scheme's (pip install --user)."""
    exe = "llmspeed" + (sysconfig.get_config_var("EXE") or "")
    schemes = [None]
    if sys.version_info >= (3, 10):
        schemes.append(sysconfig.get_preferred_scheme("user"))
    else:
        schemes.append("posix_user" if os.name == "posix" else "nt_user")
    for scheme in schemes:
        scripts = sysconfig.get_path("scripts", scheme) if scheme else sysconfig.get_path("scripts")
        path = os.path.join(scripts, exe)
        if os.path.isfile(path):
            return path
    raise FileNotFoundError(f"the llmspeed binary is not installed next to this package ({exe})")
