"""Stand-in ``sglang`` package of the sandbox image: only ``python3 -m sglang.launch_server``."""
