#!/bin/sh
# Node labels the pods of kimi-sglang-tp8pp2-h100 select (node names taken to be the inventory's host names).
set -e
kubectl label node --overwrite h100-01 fleet.io/gpu=h100 fleet.io/net=ens10f0
kubectl label node --overwrite h100-02 fleet.io/gpu=h100 fleet.io/net=ens10f0
