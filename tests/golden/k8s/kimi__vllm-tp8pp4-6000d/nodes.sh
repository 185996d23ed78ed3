#!/bin/sh
# Node labels the pods of kimi-vllm-tp8pp4-6000d select (node names taken to be the inventory's host names).
set -e
kubectl label node --overwrite rtx-01 fleet.io/gpu=rtx-6000d fleet.io/net=ens1f0np0.gid3
kubectl label node --overwrite rtx-02 fleet.io/gpu=rtx-6000d fleet.io/net=ens1f0np0.gid3
kubectl label node --overwrite rtx-03 fleet.io/gpu=rtx-6000d fleet.io/net=ens1f0np0.gid5
kubectl label node --overwrite rtx-04 fleet.io/gpu=rtx-6000d fleet.io/net=ens1f0np0.gid3
