"""``python3 -m sglang.launch_server ARGS`` in the sandbox image runs the engine stand-in."""

import sys

from standin.server import main  # type: ignore[import-not-found]  # /app/standin in the image

main(["sglang-launch", *sys.argv[1:]])
