"""A test-only engine, the smallest plug-in: this module and its recipe (recipes/tiny/single.yaml)
are all it takes; nothing in ``launcher/`` names it.

Stands in for a third engine (say TensorRT-LLM's ``trtllm-serve``).  Its program is SGLang's
``launch_server`` with the fewest flags, because that is what the sandbox's engine stand-in runs
(and checks against SGLang's option snapshot): the engine object, not the program, is under test.
"""

from __future__ import annotations

from launcher.engines.base import Engine
from launcher.engines.context import DIST_INIT, HTTP, InstanceContext
from launcher.model import Recipe

NAME = "tiny"
PORT = 31000  # its own default HTTP port, neither SGLang's nor vLLM's


class Tiny(Engine):
    name = NAME
    label = "Tiny"
    entry = ("python3", "-m", "sglang.launch_server")
    http_port = PORT
    rendezvous_port = DIST_INIT
    metrics_kind = "sglang"  # the program serves SGLang's metric names

    def argv(self, recipe: Recipe, ctx: InstanceContext) -> tuple[str, ...]:
        return (
            *self.entry, "--model-path", recipe.model, "--served-model-name", recipe.served_model_name or recipe.model,
            "--host", "0.0.0.0", "--port", str(ctx.ports[HTTP]),
            "--tp-size", str(ctx.parallelism.tp), *recipe.engine_args,
        )  # fmt: skip

    def env(self, ctx: InstanceContext) -> dict[str, str]:
        return {"TINY_HOST_IP": ctx.data_ip}


ENGINE = Tiny()
