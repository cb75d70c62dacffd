"""`python -m llmspeed ARGS` runs the installed binary with ARGS, replacing this process."""

import os
import sys

from llmspeed import find_llmspeed_bin


def main() -> None:
    binary = find_llmspeed_bin()
    os.execv(binary, [binary, *sys.argv[1:]])


if __name__ == "__main__":
    main()
