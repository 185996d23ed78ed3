#!/bin/sh
# Node labels the pods of mistral-vllm-tp1-h100-baseline select (node names taken to be the inventory's host names).
set -e
kubectl label node --overwrite h100-01 fleet.io/gpu=h100 fleet.io/net=ens10f0
