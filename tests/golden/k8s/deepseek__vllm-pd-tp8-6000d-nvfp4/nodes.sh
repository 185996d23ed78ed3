#!/bin/sh
# Node labels the pods of deepseek-vllm-pd-tp8-6000d-nvfp4 select (node names taken to be the inventory's host names).
set -e
kubectl label node --overwrite rtx-01 fleet.io/gpu=rtx-6000d fleet.io/net=ens1f0np0.gid3
kubectl label node --overwrite rtx-02 fleet.io/gpu=rtx-6000d fleet.io/net=ens1f0np0.gid3
kubectl label node --overwrite rtx-03 fleet.io/gpu=rtx-6000d fleet.io/net=ens1f0np0.gid5
