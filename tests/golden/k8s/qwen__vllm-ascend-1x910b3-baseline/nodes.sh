#!/bin/sh
# Node labels the pods of qwen-vllm-ascend-1x910b3-baseline select (node names taken to be the inventory's host names).
set -e
kubectl label node --overwrite ascend-01 fleet.io/gpu=ascend-910b3
