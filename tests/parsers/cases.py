"""Argvs with the exact verdict of each engine's real parser (checked against it in tier 2).

A case is (engine, version, argv, problems): problems == () means the real parser accepts the
argv; otherwise problems[0] is the real parser's own error message.
"""

from __future__ import annotations

M = ("--model-path", "m")  # SGLang's one required option
SGL = ("sglang", "0.5.23")
V33 = ("vllm", "0.33.0")
V30 = ("vllm", "0.30.0")
ASCEND = ("vllm-ascend", "0.23.0")
ROUTER = ("sglang-router", "0.3.2")
VROUTER = ("vllm-router", "0.1.17")
MOONCAKE = ("mooncake", "0.3.13.post1")
TP = "argument --tp-size/--tensor-parallel-size"
VTP = "argument --tensor-parallel-size/-tp"
SERVE_MODEL_FIRST = (
    "ValueError: `model` should be provided as the first positional argument when using"
    " `vllm serve`. i.e. `vllm serve <model> --<arg> <value>`."
)

Case = tuple[tuple[str, str], tuple[str, ...], tuple[str, ...]]

CASES: tuple[Case, ...] = (
    # --- SGLang 0.5.23: accepted
    (SGL, (*M, "--tp", "8", "--nnodes", "2", "--node-rank", "0", "--dist-init-addr",
           "10.0.0.1:5000", "--disaggregation-mode", "prefill"), ()),
    (SGL, ("--model-path=m", "--attn-dp-size", "4"), ()),
    (SGL, ("--model", "m", "--context-length", "128k", "--max-total-tokens", "2Mi"), ()),
    (SGL, (*M, "--ep", "8", "--moe-a2a-backend", "deepep"), ()),
    (SGL, (*M, "--disaggregation-mo", "decode"), ()),  # unique prefix
    (SGL, (*M, "--tp=8", "--tp-s", "8", "--mem", "0.8"), ()),  # repeated option, prefixes
    (SGL, (*M, "--enable-dp-attention"), ()),  # deprecated, still parses
    (SGL, (*M, "--enable-tf32-matmul", "--no-enable-tf32-matmul"), ()),
    (SGL, (*M, "--disaggregation-mode=prefill", "--disaggregation-ib-device", "mlx5_0,mlx5_1",
           "--cuda-graph-max-bs-decode", "256", "--host", "0.0.0.0"), ()),
    (SGL, (*M, "--disaggregation-transfer-backend", "nixl", "--disaggregation-bootstrap-port",
           "8998"), ()),
    (SGL, (*M, "--cuda-graph-bs-decode", "1", "2", "4", "--trust-remote-code"), ()),
    # --- SGLang 0.5.23: rejected
    (SGL, (*M, "--bogus-flag"), ("unrecognized arguments: --bogus-flag",)),
    (SGL, (*M, "--disaggregation-mode", "sideways"), (
        "argument --disaggregation-mode: invalid choice: 'sideways'"
        " (choose from 'null', 'prefill', 'decode')",)),
    (SGL, (*M, "--tp", "eight"), (f"{TP}: invalid int value: 'eight'",)),
    (SGL, (*M, "--tp"), (f"{TP}: expected one argument",)),
    (SGL, (*M, "--tp", "--nnodes", "2"), (f"{TP}: expected one argument",)),
    (SGL, (*M, "--enable-ep-moe"), ("unrecognized arguments: --enable-ep-moe",)),
    (SGL, (*M, "--cuda-graph-max-bs", "8"), (
        "ambiguous option: --cuda-graph-max-bs could match --cuda-graph-max-bs-decode,"
        " --cuda-graph-max-bs-prefill",)),
    (SGL, (*M, "--dist", "x"), (
        "ambiguous option: --dist could match --dist-timeout, --dist-init-addr",)),
    (SGL, ("--tp", "8"), ("the following arguments are required: --model-path/--model",)),
    (SGL, ("m",), (
        "the following arguments are required: --model-path/--model",
        "unrecognized arguments: m",
    )),
    (SGL, (*M, "--context-length", "1.5Ki"), (
        "argument --context-length: Decimals are not allowed with IEC suffixes like 'Ki'. Use"
        " an integer IEC value such as '1Ki', or an SI value such as '1.5K'.",)),
    (SGL, (*M, "--context-length", "12x"), (
        "argument --context-length: Invalid integer value: '12x'. Use a plain integer, SI"
        " suffixes (1k, 1M), or IEC suffixes (1Ki, 1Mi). Suffixes are case-sensitive.",)),
    (SGL, (*M, "--enable-tf32-matmul=1"), (
        "argument --enable-tf32-matmul/--no-enable-tf32-matmul: ignored explicit argument '1'",)),
    (SGL, (*M, "--monokernel-backend", "x"), (
        "argument --monokernel-backend: invalid choice: 'x' (choose from 'amd')",)),
    (SGL, (*M, "--tp", "eight", "--bogus"), (
        f"{TP}: invalid int value: 'eight'",
        "unrecognized arguments: --bogus",
    )),
    # --- vLLM 0.33.0
    (V33, ("m", "--tensor-parallel-size", "8", "--pipeline-parallel-size", "2", "--nnodes", "2",
           "--node-rank", "0", "--master-addr", "10.0.0.1", "--master-port", "5000"), ()),
    (V33, ("m", "-dp", "4", "--data-parallel-size-local", "2", "--data-parallel-address",
           "10.0.0.1", "--data-parallel-rpc-port", "13345", "--data-parallel-start-rank", "2",
           "--headless"), ()),
    (V33, ("--model", "m", "-tp", "2"), ()),  # --model moves to the positional
    (V33, ("m", "--tensor_parallel_size", "2"), ()),  # underscores
    (V33, ("m", "-O3"), ()),
    (V33, ("m", "--kv-transfer-config", '{"kv_connector":"NixlConnector","kv_role":"kv_both"}'),
     ()),
    (V33, ("m", "--kv-transfer-config.kv_connector", "NixlConnector",
           "--kv-transfer-config.kv_role", "kv_both"), ()),  # dotted JSON
    (V33, ("m", "-sc.method", "mtp", "--max-model-len", "32k"), ()),
    (V33, ("m", "--enable-prefix-caching", "--no-enable-prefix-caching",
           "--disable-prefix-caching"), ()),
    (V33, ("m", "--tensor-parallel", "2", "--quantization", "None"), ()),
    (V33, ("m", "--bogus-flag"), ("unrecognized arguments: --bogus-flag",)),
    (V33, ("m", "-tp", "eight"), (f"{VTP}: invalid int value: 'eight'",)),
    (V33, ("m", "--tensor"), (f"{VTP}: expected one argument",)),
    (V33, ("m", "--model"), ("IndexError: list index out of range",)),
    (V33, ("--served-model-name", "x"), (SERVE_MODEL_FIRST,)),
    (V33, ("m", "--max-model-len", "1.5K"), (
        "argument --max-model-len: Decimals are not allowed with binary suffixes like K. Did"
        " you mean to use 1.5k instead?",)),
    (V33, ("m", "--dtype", "bf16"), (
        "argument --dtype: invalid choice: 'bf16' (choose from 'auto', 'bfloat16', 'float',"
        " 'float16', 'float32', 'half')",)),
    (V33, ("m", "extra"), ("unrecognized arguments: extra",)),
    (V33, ("m", "--task", "embed"), (
        "unrecognized arguments: --task embed\n\nHint: --task is not a vllm serve option. For"
        " embedding, reranking, or reward models, use --runner pooling. To adapt a generative"
        " model for pooling, also use --convert embed, --convert classify, or --convert"
        " reward.",)),
    (V33, ("m", "--data-parallel"), (
        "ambiguous option: --data-parallel could match --data-parallel-supervisor-port,"
        " --data-parallel-size, --data-parallel-rank, --data-parallel-start-rank,"
        " --data-parallel-size-local, --data-parallel-address, --data-parallel-rpc-port,"
        " --data-parallel-backend, --data-parallel-hybrid-lb, --data-parallel-external-lb,"
        " --data-parallel-multi-port-external-lb",)),
    # --- vLLM 0.30.0 (pinned by recipes)
    (V30, ("m", "-tp", "4", "--enable-expert-parallel", "--max-model-len", "1048576"), ()),
    (V30, ("m", "--bogus-flag"), ("unrecognized arguments: --bogus-flag",)),
    # --- vllm-ascend 0.23 (upstream vLLM 0.23.0 parser)
    (ASCEND, ("m", "-tp", "1", "--max-model-len", "32768"), ()),
    (ASCEND, ("m", "--tp", "2"), ("unrecognized arguments: --tp 2",)),
    (ASCEND, ("m", "--task", "embed"), ("unrecognized arguments: --task embed",)),  # no hint
    # --- sglang-router 0.3.2
    (ROUTER, ("--pd-disaggregation", "--prefill", "http://a:30000", "8998", "--prefill",
              "http://b:30000", "--decode", "http://c:30000", "--policy", "round_robin",
              "--port", "8000"), ()),
    (ROUTER, ("--worker-urls", "http://a:30000", "http://b:30000", "--host", "0.0.0.0"), ()),
    (ROUTER, ("--worker-urls",), ()),  # nargs '*'
    (ROUTER, ("--policy", "sticky"), (
        "argument --policy: invalid choice: 'sticky' (choose from 'random', 'round_robin',"
        " 'cache_aware', 'power_of_two', 'manual')",)),
    (ROUTER, ("--decode",), ("argument --decode: expected 1 argument",)),
    (ROUTER, ("--prefill",), ("argument --prefill: expected at least one argument",)),
    # --- vllm-router 0.1.17
    (VROUTER, ("--vllm-pd-disaggregation", "--kv-connector", "nixl", "--prefill", "http://a:8000",
               "--prefill", "http://b:8000", "--decode", "http://c:8000", "--host", "0.0.0.0",
               "--port", "8100", "--prometheus-host", "0.0.0.0", "--prometheus-port", "29000"), ()),
    (VROUTER, ("--vllm-pd-disaggregation", "--kv-connector", "mooncake", "--prefill",
               "http://a:8000", "8998", "--prefill", "http://a:8001", "NONE", "--decode",
               "http://c:8000"), ()),
    (VROUTER, ("--worker-urls", "http://a:8000", "http://b:8000", "--prometheus-host", "0.0.0.0",
               "--prometheus-port", "29000"), ()),
    (VROUTER, ("--prefill", "http://a:8000", "8998", "ignored"), ()),  # values after the port
    (VROUTER, ("--pd-disaggregation", "--prefill", "http://a:8000"), (
        "unrecognized arguments: --pd-disaggregation",)),  # sglang-router's flag
    (VROUTER, ("--prefill", "http://a:8000", "bootstrap"), (
        "ValueError: Invalid bootstrap port: bootstrap. Must be a number or 'none'",)),
    (VROUTER, ("--decode", "http://c:8000", "8998"), ("unrecognized arguments: 8998",)),
    (VROUTER, ("--kv-connector", "lmcache"), (
        "argument --kv-connector: invalid choice: 'lmcache' (choose from 'nixl', 'mooncake',"
        " 'moriio')",)),
    (VROUTER, ("--prometheus", "9000"), (
        "ambiguous option: --prometheus could match --prometheus-port, --prometheus-host",)),
    (VROUTER, ("--policy", "sticky"), (
        "argument --policy: invalid choice: 'sticky' (choose from 'random', 'round_robin',"
        " 'cache_aware', 'kv_aware', 'power_of_two', 'consistent_hash', 'sticky_least_loaded')",)),
    (VROUTER, ("--decode",), ("argument --decode: expected 1 argument",)),
    (VROUTER, ("--prefill",), ("argument --prefill: expected at least one argument",)),
    (VROUTER, ("--prometheus-port", "metrics"), (
        "argument --prometheus-port: invalid int value: 'metrics'",)),
    # --- mooncake_master (gflags)
    (MOONCAKE, ("--rpc_port=50051", "--metrics_port", "9003",
                "--enable_http_metadata_server=true", "--http_metadata_server_port=8080",
                "--noenable_ha"), ()),
    (MOONCAKE, ("--rpc-port=1", "--noenable-ha"), ()),  # gflags reads - as _
    (MOONCAKE, ("--rpc-port=x",), ("ERROR: illegal value 'x' specified for int32 flag 'rpc_port'",)),
    (MOONCAKE, ("--no-enable-ha",), ("ERROR: unknown command line flag 'no-enable-ha'",)),
    (MOONCAKE, ("--rpc-prt=1",), ("ERROR: unknown command line flag 'rpc-prt'",)),
    (MOONCAKE, ("--rpc_port=x",), ("ERROR: illegal value 'x' specified for int32 flag 'rpc_port'",)),
    (MOONCAKE, ("--rpc_port",), ("ERROR: flag '--rpc_port' is missing its argument",)),
    (MOONCAKE, ("--rpc_port=x", "--rpc_port=y"), (  # gflags keeps the last error per flag
        "ERROR: illegal value 'y' specified for int32 flag 'rpc_port'",)),
    (MOONCAKE, ("--", "--bogus"), ()),  # flags end at --
    (MOONCAKE, ("--helpfull",), (
        "exits at parse time (gflags help/version/completion flag); the program would not start",)),
    (MOONCAKE, ("--enable_ha=maybe",), (
        "ERROR: illegal value 'maybe' specified for bool flag 'enable_ha'",)),
    (MOONCAKE, ("--noport",), (
        "ERROR: boolean value (noport) specified for int32 command line flag",)),
)
