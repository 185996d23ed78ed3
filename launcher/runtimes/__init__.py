"""Runtimes: how a unit runs on a host (docker, systemd), one module each (see base.py)."""
