"""Deploying a rendered plan over SSH: locks, manifests, health gates, up/status/logs/down."""
